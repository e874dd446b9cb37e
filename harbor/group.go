package harbor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/task"
)

// Selection picks the tasks of a dataset by their folder names (path.Match globs).
type Selection struct {
	Include, Exclude []string
}

// LoadNative loads the Harbor task folder dir as an agentenv task run with o (see Native), or,
// given a File that Native made ("DIR#agent=NAME…"), the task as it was made.
func LoadNative(dir string, o Options) (*task.Task, error) {
	if d, mo, ok := cutMark(dir); ok {
		dir, o = d, mo
	}
	t, err := Load(dir)
	if err != nil {
		return nil, err
	}
	nt, err := Native(t, o)
	if err != nil {
		return nil, err
	}
	nt.File = dir + o.normal().mark()
	return nt, nil
}

// IsNative reports whether name is a Harbor task folder, a dataset of them, or a File that
// Native made: what LoadNative and Group take.
func IsNative(name string) bool {
	if d, _, ok := cutMark(name); ok {
		return IsTask(d)
	}
	if IsTask(name) {
		return true
	}
	ents, err := os.ReadDir(name)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.IsDir() && IsTask(filepath.Join(name, e.Name())) {
			return true
		}
	}
	return false
}

// Group returns the Harbor task folder or dataset dir as an eval: one entry per selected
// task, each run k times, concurrency episodes at once over them all. Every task is loaded
// before anything runs, and every task's errors come in one answer.
func Group(dir string, sel Selection, o Options, k, concurrency int, over eval.Overrides) (*eval.File, error) {
	dirs, err := Dataset(dir, sel.Include, sel.Exclude)
	if err != nil {
		return nil, err
	}
	f := &eval.File{Name: filepath.Base(filepath.Clean(dir)), Concurrency: max(concurrency, 1), Path: dir}
	var errs []error
	for _, d := range dirs {
		t, err := LoadNative(d, o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.Tasks = append(f.Tasks, eval.Entry{Task: t, K: max(k, 1), Overrides: over})
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", errors.Join(errs...), agentenv.ErrInvalid)
	}
	return f, nil
}

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
	nt, _, err := loadNative(dir, o)
	return nt, err
}

// loadNative is LoadNative, with the task's warnings (Task.Warnings), each naming its file.
func loadNative(dir string, o Options) (*task.Task, []string, error) {
	if d, mo, ok := cutMark(dir); ok {
		dir, o = d, mo
	}
	t, err := Load(dir)
	if err != nil {
		return nil, nil, err
	}
	nt, err := Native(t, o)
	if err != nil {
		return nil, nil, err
	}
	nt.File = dir + o.normal().mark()
	return nt, warnings(t), nil
}

// warnings are t's warnings with its folder before each: "DIR/task.toml:LINE: ...".
func warnings(t *Task) []string {
	out := make([]string, 0, len(t.Warnings))
	for _, w := range t.Warnings {
		out = append(out, filepath.Join(t.Dir, w))
	}
	return out
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
// before anything runs, and every task's errors come in one answer; the tasks' warnings
// (unknown keys, deprecated spellings: Task.Warnings), each naming its task.toml and line, come
// with the eval, for the caller to show.
func Group(dir string, sel Selection, o Options, k, concurrency int, over eval.Overrides) (*eval.File, []string, error) {
	dirs, err := Dataset(dir, sel.Include, sel.Exclude)
	if err != nil {
		return nil, nil, err
	}
	f := &eval.File{Name: filepath.Base(filepath.Clean(dir)), Concurrency: max(concurrency, 1), Path: dir}
	var errs []error
	var warns []string
	for _, d := range dirs {
		t, w, err := loadNative(d, o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		warns = append(warns, w...)
		f.Tasks = append(f.Tasks, eval.Entry{Task: t, K: max(k, 1), Overrides: over})
	}
	if len(errs) > 0 {
		err := errors.Join(errs...)
		if errors.Is(err, agentenv.ErrInvalid) {
			return nil, nil, err // said once: a second ": invalid request" tells the user nothing
		}
		return nil, nil, fmt.Errorf("%w: %w", err, agentenv.ErrInvalid)
	}
	return f, warns, nil
}

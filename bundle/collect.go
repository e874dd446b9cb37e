package bundle

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/harbor"
	"github.com/agentenv/agentenv/spec"
	"github.com/agentenv/agentenv/task"
)

// Kind is what a bundle holds, which says how its entry is run.
type Kind string

// Kinds of bundles.
const (
	KindTask          Kind = "task"           // a task file: agentenv run
	KindEval          Kind = "eval"           // an eval file: agentenv run
	KindEnv           Kind = "env"            // an env file: agentenv env deploy
	KindHarborTask    Kind = "harbor-task"    // a Harbor task folder: agentenv run
	KindHarborDataset Kind = "harbor-dataset" // a folder of Harbor task folders: agentenv run
	KindRuns          Kind = "runs"           // a finished run group, its documents and files: agentenv runs pull
)

// Kinds lists every kind.
var Kinds = []Kind{KindTask, KindEval, KindEnv, KindHarborTask, KindHarborDataset, KindRuns}

// Source is what a path packs into: its kind and name, the entry (the file, or for a Harbor
// kind the folder, that is run) and every file it reads, all absolute and cleaned.
type Source struct {
	Kind  Kind
	Name  string
	Entry string
	Files []string
}

// Collect returns what path packs into, as `agentenv run` and `env deploy` read it: a Harbor
// task folder or dataset (every file of each task folder: a Harbor task is self-contained by
// its spec), a task file or a folder with one, an eval file or an env file, with the files
// their loaders list (task.Task.Files, eval.File.Files, spec.Env.Files). What does not load,
// a file named by an absolute path and the built-in task hello are errors wrapping
// agentenv.ErrInvalid.
func Collect(path string) (Source, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if path == "hello" {
			return Source{}, fmt.Errorf("hello is agentenv's built-in task: it has no files to push (push a task folder or file): %w", agentenv.ErrInvalid)
		}
		return Source{}, fmt.Errorf("push %s: %w: %w", path, err, agentenv.ErrInvalid)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return Source{}, fmt.Errorf("push %s: %w", path, err)
	}
	if fi.IsDir() && harbor.IsNative(abs) {
		return collectHarbor(abs)
	}
	if fi.IsDir() {
		t, err := task.LoadPath(abs)
		if err != nil {
			return Source{}, err
		}
		return ofTask(t)
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return Source{}, fmt.Errorf("push %s: %w: %w", path, err, agentenv.ErrInvalid)
	}
	switch topKey(data) {
	case "tasks":
		f, err := eval.Load(abs)
		if err != nil {
			return Source{}, err
		}
		files, err := f.Files()
		if err != nil {
			return Source{}, err
		}
		return Source{Kind: KindEval, Name: f.Name, Entry: files[0], Files: files}, nil
	case "env":
		e, err := spec.Load(abs)
		if err != nil {
			return Source{}, err
		}
		files, err := e.Files()
		if err != nil {
			return Source{}, err
		}
		return Source{Kind: KindEnv, Name: e.Name, Entry: files[0], Files: files}, nil
	}
	t, err := task.Load(abs)
	if err != nil {
		return Source{}, err
	}
	return ofTask(t)
}

func ofTask(t *task.Task) (Source, error) {
	files, err := t.Files()
	if err != nil {
		return Source{}, err
	}
	return Source{Kind: KindTask, Name: t.Name, Entry: files[0], Files: files}, nil
}

// topKey says what data's top-level fields make it: "steps" (a task), "tasks" (an eval),
// "env" (an env's fields and neither), or "" when it does not parse or has none of them.
func topKey(data []byte) string {
	var top map[string]yaml.Node
	if yaml.Unmarshal(data, &top) != nil {
		return ""
	}
	for _, k := range []string{"steps", "tasks"} {
		if _, ok := top[k]; ok {
			return k
		}
	}
	for _, k := range []string{"servers", "websites", "service_db", "browser", "gateway"} {
		if _, ok := top[k]; ok {
			return "env"
		}
	}
	return ""
}

// collectHarbor collects a Harbor task folder, or a dataset: every file of each task folder,
// each loaded first so that a broken task is refused before anything is pushed.
func collectHarbor(dir string) (Source, error) {
	src := Source{Kind: KindHarborTask, Name: filepath.Base(dir), Entry: dir}
	dirs := []string{dir}
	if !harbor.IsTask(dir) {
		src.Kind = KindHarborDataset
		var err error
		if dirs, err = harbor.Dataset(dir, nil, nil); err != nil {
			return Source{}, err
		}
	}
	var errs []error
	for _, d := range dirs {
		if _, err := harbor.Load(d); err != nil {
			errs = append(errs, err)
			continue
		}
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() {
				src.Files = append(src.Files, p)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("harbor task %s: %w", d, err))
		}
	}
	if len(errs) > 0 {
		return Source{}, errors.Join(errs...)
	}
	slices.Sort(src.Files)
	return src, nil
}

// root returns the folder a bundle of src is relative to: the deepest folder holding every
// file and, for a Harbor kind, the entry folder itself (so that its name travels with it).
func (src Source) root() string {
	dirs := make([]string, 0, len(src.Files)+1)
	for _, f := range src.Files {
		dirs = append(dirs, filepath.Dir(f))
	}
	if src.Kind == KindHarborTask || src.Kind == KindHarborDataset {
		dirs = append(dirs, filepath.Dir(src.Entry))
	}
	root := dirs[0]
	for _, d := range dirs[1:] {
		for !within(root, d) {
			root = filepath.Dir(root)
		}
	}
	return root
}

// within reports whether path p is dir or below it (both cleaned and absolute).
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

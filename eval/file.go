// Package eval runs evals: files that list tasks, each with its k, seeds and overrides, run
// as one run group under one concurrency limit. A group is a ledger document written before
// its first episode; every episode's run document names it in attrs.group, with the slot it
// fills (attrs.group_task, attrs.instance, attrs.attempt). A group that stopped (cancelled,
// killed, episodes ending on infrastructure errors) is resumed slot by slot: only the slots
// whose latest episode did not finish run again. A group may be one shard of an eval run by N
// processes (Shard), joined with the others' by Merge. Finished episodes export as
// chat-format JSONL or CSV.
//
// An eval file is YAML or JSON, decoded strictly (an unknown field is an error naming its
// file, line and field):
//
//	name: notes-sweep
//	concurrency: 4                 # episodes at once over the whole group; 1 if absent
//	tasks:
//	  - task: ../notes-task        # a task file or folder, relative to this file
//	    k: 4                       # episodes per instance; 1 if absent
//	    seeds: users.csv           # optional CSV: one instance per row
//	    overrides:
//	      placeholders: {who: ada} # fill <who> in every instance, over the seeds column
//	      provider: docker         # provider of steps that name none
//	      model: {name: gpt-4.1-mini, base_url: "http://…/v1"}   # [model] keys for its agents
//
// Overrides change what a run of the task may be told from outside without editing its file:
// placeholders, the default provider, and the [model] settings of its built-in model agents
// (base_url, name, api_key, input_price, output_price). A step's own fields (an explicit
// provider, the agent kind) are the task file's; make them placeholders to vary them.
package eval

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/yamlfile"
	"github.com/agentenv/agentenv/task"
)

// ModelKeys are the [model] settings an eval's overrides may set for a task.
var ModelKeys = []string{"base_url", "name", "api_key", "input_price", "output_price"}

// File is a parsed eval file whose tasks all loaded.
type File struct {
	Name        string
	Concurrency int // 1 if the file names none
	Tasks       []Entry
	Path        string // as given
	Digest      string // "sha256:" and the hex digest of the file's bytes ("" for a single task)
	// Pinned are the images of the bundle the file was read from, pinned by digest (see
	// Runner.Fetch); its episodes run them (task.Runner.Pinned) over the runner's own.
	Pinned map[string]string
}

// Entry is one task of an eval.
type Entry struct {
	Task      *task.Task
	K         int    // episodes per instance, >= 1
	Seeds     string // the seeds CSV's path (relative paths resolved against the eval file), or ""
	Overrides Overrides
	Line      int // where the entry starts in the eval file

	written [2]pathField // task and seeds as the eval file writes them, for Files
}

// pathField is a path as an eval file writes it, with where.
type pathField struct {
	value, field string
	line         int
}

// Overrides are what an eval sets for one of its tasks.
type Overrides struct {
	Placeholders map[string]string `json:"placeholders,omitempty"`
	Provider     string            `json:"provider,omitempty"`
	Model        map[string]string `json:"model,omitempty"` // keys of ModelKeys
}

// IsEval reports whether data looks like an eval file rather than a task file: a mapping with
// a top-level tasks field (a task file has steps).
func IsEval(data []byte) bool {
	var top map[string]yaml.Node
	if err := yaml.Unmarshal(data, &top); err != nil {
		return false
	}
	_, tasks := top["tasks"]
	_, steps := top["steps"]
	return tasks && !steps
}

// Load reads and checks the eval file at path and loads every task it names. A missing task
// or seeds file, a task file that does not load and a bad field are errors naming the eval
// file's line and field (or the task file's); every problem is reported at once, each
// wrapping agentenv.ErrInvalid.
func Load(path string) (*File, error) { return LoadWith(path, task.Loader{}) }

// LoadWith is [Load] with the task files loaded by tasks, so that its checks (a step's
// provider) are reported with the eval file's errors.
func LoadWith(path string, tasks task.Loader) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load eval: %w: %w", err, agentenv.ErrInvalid)
	}
	return parse(path, data, tasks)
}

// Parse decodes data as the eval file named name (its folder is the base of relative paths).
func Parse(name string, data []byte) (*File, error) { return parse(name, data, task.Loader{}) }

func parse(name string, data []byte, tasks task.Loader) (*File, error) {
	root, err := yamlfile.Parse(name, "eval file", data)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	f := &File{Path: name, Digest: "sha256:" + hex.EncodeToString(sum[:]), Concurrency: 1}
	d := yamlfile.NewDecoder(name)
	dir := filepath.Dir(name)
	var loadErrs []error
	sawTasks := false
	d.Fields(root, "", []string{"name", "description", "concurrency", "tasks"}, func(key string, v *yaml.Node, p string) {
		switch key {
		case "name":
			f.Name = d.Str(v, p)
		case "description":
			d.Str(v, p)
		case "concurrency":
			if f.Concurrency = d.Integer(v, p); f.Concurrency < 1 && !d.Failed[p] {
				d.Errorf(v.Line, p, "want at least 1, got %d", f.Concurrency)
			}
		case "tasks":
			sawTasks = true
			d.List(v, p, func(i int, v *yaml.Node, p string) {
				e, err := decodeEntry(d, dir, v, p, tasks)
				if err != nil {
					loadErrs = append(loadErrs, err)
				}
				if e.Task != nil {
					f.Tasks = append(f.Tasks, e)
				}
			})
		}
	})
	if f.Name == "" && !d.Failed["name"] {
		d.Errorf(root.Line, "name", "missing field")
	}
	if !sawTasks {
		d.Errorf(root.Line, "tasks", "missing field")
	} else if len(f.Tasks) == 0 && len(d.Errs) == 0 && len(loadErrs) == 0 {
		d.Errorf(root.Line, "tasks", "want at least one task")
	}
	if errs := append(d.Errs, loadErrs...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f, nil
}

func decodeEntry(d *yamlfile.Decoder, dir string, n *yaml.Node, path string, tasks task.Loader) (Entry, error) {
	e := Entry{K: 1, Line: n.Line}
	var taskPath string
	var taskLine int
	d.Fields(n, path, []string{"task", "k", "seeds", "overrides"}, func(key string, v *yaml.Node, p string) {
		switch key {
		case "task":
			taskPath, taskLine = d.Str(v, p), v.Line
			e.written[0] = pathField{taskPath, p, v.Line}
		case "k":
			if e.K = d.Integer(v, p); e.K < 1 && !d.Failed[p] {
				d.Errorf(v.Line, p, "want at least 1, got %d", e.K)
			}
		case "seeds":
			if s := d.Str(v, p); s != "" {
				e.written[1] = pathField{s, p, v.Line}
				e.Seeds = resolve(dir, s)
				if _, err := os.Stat(e.Seeds); err != nil {
					d.Errorf(v.Line, p, "seeds file %s: %v", e.Seeds, statMsg(err))
				}
			}
		case "overrides":
			e.Overrides = decodeOverrides(d, v, p)
		}
	})
	if taskPath == "" {
		if !d.Failed[yamlfile.Join(path, "task")] {
			d.Errorf(n.Line, yamlfile.Join(path, "task"), "missing field")
		}
		return e, nil
	}
	tp := resolve(dir, taskPath)
	if _, err := os.Stat(tp); err != nil {
		d.Errorf(taskLine, yamlfile.Join(path, "task"), "task %s: %v", tp, statMsg(err))
		return e, nil
	}
	t, err := tasks.LoadPath(tp)
	if err != nil {
		return e, fmt.Errorf("%s:%d: %s: %w", d.File, taskLine, yamlfile.Join(path, "task"), err)
	}
	e.Task = t
	return e, nil
}

func decodeOverrides(d *yamlfile.Decoder, n *yaml.Node, path string) Overrides {
	var o Overrides
	d.Fields(n, path, []string{"placeholders", "provider", "model"}, func(key string, v *yaml.Node, p string) {
		switch key {
		case "placeholders":
			o.Placeholders = d.StringMap(v, p)
		case "provider":
			o.Provider = d.Str(v, p)
		case "model":
			o.Model = map[string]string{}
			d.Fields(v, p, ModelKeys, func(key string, v *yaml.Node, p string) {
				if v = d.Resolve(v, p); v == nil || v.Kind != yaml.ScalarNode || yamlfile.IsNull(v) {
					if v != nil {
						d.Errorf(v.Line, p, "want a value, got %s", yamlfile.Describe(v))
					}
					return
				}
				if key == "input_price" || key == "output_price" {
					if _, err := strconv.ParseFloat(v.Value, 64); err != nil {
						d.Errorf(v.Line, p, "want a number, got %q", v.Value)
						return
					}
				}
				o.Model[key] = v.Value
			})
		}
	})
	return o
}

func resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

func statMsg(err error) string {
	if errors.Is(err, os.ErrNotExist) {
		return "no such file or folder"
	}
	return err.Error()
}

// ForTask returns the eval of one task run from the command line: k episodes per instance of
// t with seeds, concurrency at once. Its group is a group like any other.
func ForTask(t *task.Task, k, concurrency int, seeds string, o Overrides) *File {
	return &File{Name: t.Name, Concurrency: max(concurrency, 1), Path: t.File,
		Tasks: []Entry{{Task: t, K: max(k, 1), Seeds: seeds, Overrides: o, Line: 0}}}
}

// options are the task.RunOptions of e's episodes in slots (every one if nil).
func (e Entry) options(slots []task.Slot) task.RunOptions {
	return task.RunOptions{K: e.K, Seeds: e.Seeds, Provider: e.Overrides.Provider,
		Placeholders: e.Overrides.Placeholders, Slots: slices.Clone(slots)}
}

// modelSource overrides some [model] keys of a task's runner.
type modelSource struct {
	base task.ModelSource
	over map[string]string
}

func (m modelSource) Get(key string) (string, error) {
	if v, ok := m.over[trimModel(key)]; ok {
		return v, nil
	}
	if m.base == nil {
		return "", fmt.Errorf("%s: no model settings: %w", key, agentenv.ErrInvalid)
	}
	return m.base.Get(key)
}

// trimModel returns key without its "model." prefix, or "" for a key outside [model].
func trimModel(key string) string {
	if len(key) > len("model.") && key[:len("model.")] == "model." {
		return key[len("model."):]
	}
	return ""
}

// Files returns every file of this host the eval reads, each absolute and cleaned: the eval
// file first, then each task's files ([task.Task.Files]) and seeds CSV. A task or seeds file
// named by an absolute path is an error naming its line and field (wrapping
// agentenv.ErrInvalid): the eval could not be moved with its files (a bundle).
func (f *File) Files() ([]string, error) {
	self, err := filepath.Abs(f.Path)
	if err != nil {
		return nil, fmt.Errorf("eval %s: %w", f.Path, err)
	}
	out := []string{self}
	seen := map[string]bool{self: true}
	var errs []error
	for _, e := range f.Tasks {
		for _, w := range e.written {
			if filepath.IsAbs(w.value) {
				errs = append(errs, &yamlfile.Error{File: f.Path, Line: w.line, Path: w.field,
					Msg: fmt.Sprintf("%q is an absolute path: write it relative to the eval file, so that the eval moves with its files", w.value)})
			}
		}
		files, err := e.Task.Files()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: task %s: %w", f.Path, e.Line, e.Task.File, err))
		}
		if e.Seeds != "" {
			s, err := filepath.Abs(e.Seeds)
			if err != nil {
				return nil, fmt.Errorf("eval %s: seeds: %w", f.Path, err)
			}
			files = append(files, s)
		}
		for _, p := range files {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

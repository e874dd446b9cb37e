package task

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/confine"
	"github.com/agentenv/agentenv/spec"
)

// A task file is data, not a key to the house: the files its steps read from this host
// (write_file.from, load_data's file parts) must lie inside the task's folder, so that a task
// (or a seed or agent output substituted into one) cannot copy ../../etc/passwd into a sandbox.

// within returns path p of field (as named in messages) resolved against the task's folder,
// or an error wrapping ErrInvalid if it lies outside it, symbolic links followed.
func within(dir, field, p string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%s: %q: this task has no folder to read files from: %w", field, p, agentenv.ErrInvalid)
	}
	full, err := confine.Path(dir, p)
	var oe *confine.OutsideError
	if errors.As(err, &oe) {
		return "", fmt.Errorf("%s: %q is outside the task's folder %s: %w", field, p, oe.Dir, agentenv.ErrInvalid)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return full, nil
}

// within resolves a file a step reads from this host; see the package-level within.
func (sc *scope) within(field, p string) (string, error) { return within(sc.e.t.Dir, field, p) }

// preflight refuses, before anything runs, a task whose steps name files outside its folder
// literally (paths filled in from seeds or step outputs are checked when the step runs), or
// switch to the process provider, which runs on this host without isolation, when the run was
// given another provider.
func (t *Task) preflight(opts RunOptions) error {
	var errs []error
	check := func(s *StepSpec, field string, n *yaml.Node) {
		if n == nil || n.Kind != yaml.ScalarNode || n.Value == "" || strings.Contains(n.Value, "<") || strings.Contains(n.Value, "${") {
			return
		}
		if _, err := within(t.Dir, field, n.Value); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: step %s: %w", t.File, n.Line, s.ID, err))
		}
	}
	checkUploads := func(s *StepSpec, name string, list *yaml.Node) {
		if list == nil || list.Kind != yaml.SequenceNode {
			return
		}
		for i, e := range list.Content {
			check(s, fmt.Sprintf("%s[%d].from", name, i), field(e, "from"))
		}
	}
	for _, s := range t.Steps {
		switch s.Type {
		case "write_file":
			check(s, "from", field(s.fields, "from"))
		case TypeJudge:
			check(s, "rubric_file", field(s.fields, "rubric_file"))
		case TypePromptAgent:
			check(s, "prompt_file", field(s.fields, "prompt_file"))
			checkUploads(s, "agent.harness.upload", field(field(field(s.fields, "agent"), "harness"), "upload"))
		case TypeUpload:
			check(s, "from", field(s.fields, "from"))
		case TypeReward:
			checkUploads(s, "upload", field(s.fields, "upload"))
		case TypeScript:
			if files := field(s.fields, "files"); files != nil && files.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(files.Content); i += 2 {
					check(s, "files."+files.Content[i].Value, files.Content[i+1])
				}
			}
		case "deploy_sandbox":
			if n := field(s.fields, "provider"); n != nil {
				if err := switchesToProcess(opts.Provider, n.Value); err != nil {
					errs = append(errs, fmt.Errorf("%s:%d: step %s: %w", t.File, n.Line, s.ID, err))
				}
			}
			check(s, "build.context", field(field(s.fields, "build"), "context"))
		case "load_data":
			if parts := field(s.fields, "parts"); parts != nil && parts.Kind == yaml.SequenceNode {
				for i, p := range parts.Content {
					check(s, fmt.Sprintf("parts[%d].file", i), field(p, "file"))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// field returns the value of key in mapping n, or nil.
func field(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// switchesToProcess refuses a step's provider chain that names the process provider when the
// run was given a chain (run) that does not: a task file must not take its sandboxes out of the
// isolation the user asked for.
func switchesToProcess(run, step string) error {
	if run == "" || !names(step, "process") || names(run, "process") {
		return nil
	}
	return fmt.Errorf("provider: %q runs on this host without isolation, and this run was given %q: %w", step, run, agentenv.ErrInvalid)
}

// names reports whether the comma chain names provider p.
func names(chain, p string) bool {
	for _, n := range strings.Split(chain, ",") {
		if strings.TrimSpace(n) == p {
			return true
		}
	}
	return false
}

// Files returns every file of this host the task reads, each absolute and cleaned, the task
// file first: the env files of its deploy_env steps and the files those read
// ([spec.Env.Files]), and the files and folders (every file under them) its steps name:
// write_file and upload from, judge rubric_file, prompt_agent prompt_file and its harness's
// files and upload, reward upload, script files, deploy_agent files, deploy_sandbox
// build.context and load_data parts' file. A path written absolute, or filled in when the
// step runs (a placeholder or a step's output), is an [*Error] naming its line and field: the
// task could not be moved with its files (a bundle). The built-in task has no file to list
// and is an error too.
func (t *Task) Files() ([]string, error) {
	if t.Dir == "" {
		return nil, fmt.Errorf("task %s is built in: it has no files: %w", t.File, agentenv.ErrInvalid)
	}
	self, err := filepath.Abs(t.File)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.File, err)
	}
	out := []string{self}
	seen := map[string]bool{self: true}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	var errs []error
	// path resolves the path at n (field as messages name it) against the task's folder.
	path := func(s *StepSpec, fieldName string, n *yaml.Node) (string, bool) {
		if n == nil || n.Kind != yaml.ScalarNode || n.Value == "" {
			return "", false
		}
		fail := func(msg string) (string, bool) {
			errs = append(errs, &Error{File: t.File, Line: n.Line, Path: s.path + "." + fieldName, Msg: msg})
			return "", false
		}
		switch {
		case strings.Contains(n.Value, "<") || strings.Contains(n.Value, "${"):
			return fail(fmt.Sprintf("%q is filled in when the step runs: name the file itself, so that the task moves with its files", n.Value))
		case filepath.IsAbs(n.Value):
			return fail(fmt.Sprintf("%q is an absolute path: write it relative to the task file, so that the task moves with its files", n.Value))
		}
		p, err := filepath.Abs(filepath.Join(t.Dir, n.Value))
		if err != nil {
			return fail(err.Error())
		}
		return p, true
	}
	// tree adds the file at n, or every file under the folder at n.
	tree := func(s *StepSpec, fieldName string, n *yaml.Node) {
		p, ok := path(s, fieldName, n)
		if !ok {
			return
		}
		fi, err := os.Stat(p)
		if err != nil || !fi.IsDir() {
			add(p) // a missing file is the packer's to report, naming it
			return
		}
		err = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				add(q)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s.%s: %w", t.File, n.Line, s.path, fieldName, err))
		}
	}
	values := func(s *StepSpec, fieldName string, m *yaml.Node) {
		if m == nil || m.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			tree(s, fieldName+"."+m.Content[i].Value, m.Content[i+1])
		}
	}
	list := func(s *StepSpec, fieldName, key string, l *yaml.Node) {
		if l == nil || l.Kind != yaml.SequenceNode {
			return
		}
		for i, e := range l.Content {
			tree(s, fmt.Sprintf("%s[%d].%s", fieldName, i, key), field(e, key))
		}
	}
	for _, s := range t.Steps {
		switch s.Type {
		case TypeDeployEnv:
			p, ok := path(s, "file", field(s.fields, "file"))
			if !ok {
				continue
			}
			env, err := spec.Load(p)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %s.file: %w", t.File, field(s.fields, "file").Line, s.path, err))
				continue
			}
			files, err := env.Files()
			if err != nil {
				errs = append(errs, err)
			}
			for _, f := range files {
				add(f)
			}
		case TypeWriteFile, TypeUpload:
			tree(s, "from", field(s.fields, "from"))
		case TypeJudge:
			tree(s, "rubric_file", field(s.fields, "rubric_file"))
		case TypePromptAgent:
			tree(s, "prompt_file", field(s.fields, "prompt_file"))
			h := field(field(s.fields, "agent"), "harness")
			values(s, "agent.harness.files", field(h, "files"))
			list(s, "agent.harness.upload", "from", field(h, "upload"))
		case TypeReward:
			list(s, "upload", "from", field(s.fields, "upload"))
		case TypeScript:
			values(s, "files", field(s.fields, "files"))
		case TypeDeployAgent:
			values(s, "files", field(s.fields, "files"))
		case TypeDeploySandbox:
			tree(s, "build.context", field(field(s.fields, "build"), "context"))
		case TypeLoadData:
			list(s, "parts", "file", field(s.fields, "parts"))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

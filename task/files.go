package task

import (
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/confine"
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

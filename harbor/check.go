package harbor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/task"
)

// CheckRow is what Check found of one task: the oracle must score 1 and nop below 1.
type CheckRow struct {
	Task   string   `json:"task"`             // the task's folder name
	Oracle *float64 `json:"oracle,omitempty"` // the oracle's score; nil if it had none
	Nop    *float64 `json:"nop,omitempty"`    // nop's score
	// Problem says why the task fails the check ("" if it passes): a build error, a verifier
	// error, the oracle below 1 or nop passing, with the episode's error.
	Problem string `json:"problem,omitempty"`
}

// OK reports whether the task passed the check.
func (r CheckRow) OK() bool { return r.Problem == "" }

// CheckResult is what Check did: a row per task, and the run group that holds the episodes.
type CheckResult struct {
	Group string     `json:"group"`
	Rows  []CheckRow `json:"rows"`
}

// Check is Harbor's sanity check of a dataset for its authors: every selected task of dir runs
// once with the oracle and once with nop, in one run group of r run with opts (at
// opts.Concurrency episodes at once; opts.Bundle names the bundle dir came from), and each task
// gets a row saying whether the oracle scored 1 and nop below 1, and if not, why. A task that does not load is an error before anything runs. Each task's warnings
// (Task.Warnings, naming its task.toml and line) go to warn once, before anything runs; warn
// may be nil.
func Check(ctx context.Context, r *eval.Runner, dir string, sel Selection, opts eval.Options, over eval.Overrides, warn func(string)) (CheckResult, error) {
	dirs, err := Dataset(dir, sel.Include, sel.Exclude)
	if err != nil {
		return CheckResult{}, err
	}
	f := &eval.File{Name: "check " + filepath.Base(filepath.Clean(dir)), Concurrency: max(opts.Concurrency, 1), Path: dir}
	var errs []error
	for _, d := range dirs {
		for _, agent := range []string{AgentOracle, AgentNop} {
			t, warns, err := loadNative(d, Options{Agent: agent})
			if err != nil {
				errs = append(errs, err)
				break
			}
			if warn != nil && agent == AgentOracle {
				for _, w := range warns {
					warn(w)
				}
			}
			f.Tasks = append(f.Tasks, eval.Entry{Task: t, K: 1, Overrides: over})
		}
	}
	if len(errs) > 0 {
		return CheckResult{}, errors.Join(errs...)
	}
	res, err := r.Run(ctx, f, opts)
	out := CheckResult{Group: res.Group.ID}
	// What this run's task runners said has each episode's steps; the ledger's read-back does not.
	sums := res.Live
	if len(sums) != len(f.Tasks) {
		sums = res.Tasks
	}
	if len(sums) != len(f.Tasks) {
		return out, err
	}
	for i := 0; i+1 < len(sums); i += 2 {
		out.Rows = append(out.Rows, checkRow(filepath.Base(dirs[i/2]), sums[i], sums[i+1]))
	}
	return out, err
}

// checkRow judges one task from its oracle's and nop's summaries.
func checkRow(name string, oracle, nop task.Summary) CheckRow {
	row := CheckRow{Task: name}
	o, n := last(oracle), last(nop)
	row.Oracle, row.Nop = o.Score, n.Score
	switch {
	case o.Run == "":
		row.Problem = "oracle did not run"
	case failedStep(o, sandboxStep) != "":
		row.Problem = "build error: " + failedStep(o, sandboxStep)
	case o.Outcome == task.OutcomeError:
		row.Problem = "verifier error: " + firstLine(o.Error)
	case o.Score == nil || *o.Score < 1:
		row.Problem = fmt.Sprintf("oracle below 1 (%s): %s", o.Outcome, firstLine(o.Error))
	case n.Run == "":
		row.Problem = "nop did not run"
	case n.Outcome == task.OutcomeError:
		row.Problem = "verifier error under nop: " + firstLine(n.Error)
	case n.Score != nil && *n.Score >= 1:
		row.Problem = "nop passing: the tests pass on the untouched container"
	}
	row.Problem = strings.TrimSuffix(strings.TrimSpace(row.Problem), ":")
	return row
}

// last is the newest episode of a one-episode summary (the zero Episode if none ran).
func last(s task.Summary) task.Episode {
	if len(s.Episodes) == 0 {
		return task.Episode{}
	}
	return s.Episodes[len(s.Episodes)-1]
}

// failedStep is the error of step id in ep if it failed, else "".
func failedStep(ep task.Episode, id string) string {
	for _, s := range ep.Steps {
		if s.ID == id && s.Status == agentenv.StepFailed {
			return firstLine(s.Error)
		}
	}
	return ""
}

// firstLine is s's first line, cut to 200 bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

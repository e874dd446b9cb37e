package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// TypeScript is the script verifier's step type.
const TypeScript = "script"

// scriptOutputLimit bounds what a script verifier keeps of its stdout and of its stderr: the
// last 64 KiB of each (the whole stdout is read for the score first).
const scriptOutputLimit = 64 << 10

// script runs a command in a sandbox of the episode, such as a test suite or a verify.py the
// task ships (files, copied in first). A stdout that is, or ends with a line that is, a JSON
// object {"score": x, "results": [...]} gives the score; otherwise exit code 0 scores 1 and
// any other 0. A command that could not run, or a score outside [0,1], is an error.
type script struct {
	Sandbox string            `yaml:"sandbox" task:"required"` // the deploy_sandbox step
	Command []string          `yaml:"command" task:"required"` // argv
	Files   map[string]string `yaml:"files"`                   // path in the sandbox → file of the task's folder
}

func (s *script) Check() error {
	if len(s.Command) == 0 {
		return errors.New("command: want a non-empty argv list")
	}
	for to, from := range s.Files {
		if to == "" || from == "" {
			return fmt.Errorf("files: want a sandbox path and a local file, got %q: %q", to, from)
		}
	}
	return checkBinding("command", "", s.Command)
}

func (s *script) Refs() []Ref { return []Ref{{"sandbox", s.Sandbox, sandboxTypes}} }

func (s *script) Run(ctx context.Context, sc *scope) (Result, error) {
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return Result{}, err
	}
	m := sc.e.r.Manager
	dests := make([]string, 0, len(s.Files))
	for to := range s.Files {
		dests = append(dests, to)
	}
	slices.Sort(dests)
	for _, to := range dests {
		from, err := sc.within("files."+to, s.Files[to])
		if err != nil {
			return Result{}, err
		}
		data, err := os.ReadFile(from)
		if err != nil {
			return Result{}, fmt.Errorf("files.%s: %w", to, err)
		}
		if err := m.WriteFile(ctx, ref.Record, to, data); err != nil {
			return Result{}, fmt.Errorf("copy %s into the sandbox: %w", s.Files[to], err)
		}
	}
	res, err := m.Exec(ctx, ref.Record, s.Command)
	if err != nil {
		return Result{}, fmt.Errorf("run %s: %w", s.Command[0], err)
	}
	stdout := string(res.Stdout)
	out := map[string]string{"exit_code": strconv.Itoa(res.ExitCode),
		"stdout": tailBytes(stdout, scriptOutputLimit), "stderr": tailBytes(string(res.Stderr), scriptOutputLimit)}
	rep, found, err := scriptReport(stdout)
	if err != nil {
		return Result{Outputs: out}, err
	}
	var r Result
	if found {
		out["results"] = string(rep.Results)
		rows := rep.rows()
		if len(rows) == 0 {
			rows = []Row{{Check: "score of " + strings.Join(s.Command, " "), Expected: "1", Got: formatScore(*rep.Score), Pass: *rep.Score >= 1}}
		}
		r = verdict(rows)
		r.Score = rep.Score
	} else {
		got := strconv.Itoa(res.ExitCode)
		if res.ExitCode != 0 {
			got += ": " + tail(string(res.Stderr), 200)
		}
		r = verdict([]Row{{Check: "exit code of " + strings.Join(s.Command, " "), Expected: "0", Got: got, Pass: res.ExitCode == 0}})
	}
	r.Outputs["score"] = formatScore(*r.Score)
	for k, v := range out {
		r.Outputs[k] = v
	}
	return r, nil
}

// scriptResult is what a script prints to give its own score.
type scriptResult struct {
	Score   *float64        `json:"score"`
	Results json.RawMessage `json:"results"`
}

// rows turns results that are objects with a name (or test) and passed (or pass) into rows.
func (s scriptResult) rows() []Row {
	var items []map[string]any
	if json.Unmarshal(s.Results, &items) != nil {
		return nil
	}
	var rows []Row
	for _, it := range items {
		name, _ := it["name"].(string)
		if name == "" {
			name, _ = it["test"].(string)
		}
		pass, ok := it["passed"].(bool)
		if !ok {
			pass, ok = it["pass"].(bool)
		}
		if name == "" || !ok {
			return nil
		}
		rows = append(rows, Row{Check: name, Expected: "pass", Got: map[bool]string{true: "pass", false: "fail"}[pass], Pass: pass})
	}
	return rows
}

// scriptReport finds the report in stdout: the whole of it, or its last non-empty line, as a
// JSON object with a score. found is false when there is none; a report whose score is not a
// number in [0,1] is an error.
func scriptReport(stdout string) (scriptResult, bool, error) {
	t := strings.TrimSpace(stdout)
	candidates := []string{t}
	if i := strings.LastIndexByte(t, '\n'); i >= 0 {
		candidates = append(candidates, strings.TrimSpace(t[i+1:]))
	}
	for _, c := range candidates {
		if !strings.HasPrefix(c, "{") {
			continue
		}
		var raw map[string]json.RawMessage
		if json.Unmarshal([]byte(c), &raw) != nil {
			continue
		}
		if _, ok := raw["score"]; !ok {
			continue
		}
		var r scriptResult
		if err := json.Unmarshal([]byte(c), &r); err != nil || r.Score == nil || *r.Score < 0 || *r.Score > 1 {
			return scriptResult{}, false, fmt.Errorf("script printed a report whose score is not a number in [0,1]: %s", clip(c))
		}
		return r, true, nil
	}
	return scriptResult{}, false, nil
}

// tailBytes returns the last n bytes of s, marked when cut.
func tailBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

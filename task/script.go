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

// script runs a command in a sandbox of the episode (a deploy_sandbox step's, or a component
// of a deploy_env step's env in container mode, such as its servicedb), such as a test suite or
// a verify.py the task ships (files, copied in first). A stdout that is, or ends with a line that is, a JSON
// object {"score": x, "results": [...]} gives the score; otherwise exit code 0 scores 1 and
// any other 0. A command that could not run, or a score outside [0,1], is an error.
type script struct {
	Sandbox   string            `yaml:"sandbox"`                 // the deploy_sandbox step
	Env       string            `yaml:"env"`                     // or the deploy_env step
	Component string            `yaml:"component"`               // and its component
	Command   []string          `yaml:"command" task:"required"` // argv
	Files     map[string]string `yaml:"files"`                   // path in the sandbox → file of the task's folder
}

func (s *script) Check() error {
	if len(s.Command) == 0 {
		return errors.New("command: want a non-empty argv list")
	}
	switch {
	case (s.Sandbox == "") == (s.Env == ""):
		return errors.New("set sandbox (a deploy_sandbox step) or env and component (a deploy_env step's component), one of them")
	case s.Env != "" && s.Component == "":
		return errors.New("component: name the env's component to run in, such as servicedb")
	case s.Sandbox != "" && s.Component != "":
		return errors.New("component: only with env")
	}
	for to, from := range s.Files {
		if to == "" || from == "" {
			return fmt.Errorf("files: want a sandbox path and a local file, got %q: %q", to, from)
		}
	}
	return checkBinding("command", "", s.Command)
}

func (s *script) Refs() []Ref {
	if s.Env != "" {
		return []Ref{{"env", s.Env, envTypes}}
	}
	return []Ref{{"sandbox", s.Sandbox, sandboxTypes}}
}

// record returns the ledger record of the sandbox the script runs in.
func (s *script) record(sc *scope) (string, error) {
	return sandboxOrComponent(sc, s.Sandbox, s.Env, s.Component)
}

// sandboxOrComponent returns the ledger record of the sandbox of deploy_sandbox step sandbox,
// or else of component of deploy_env step env (container mode only).
func sandboxOrComponent(sc *scope, sandbox, env, component string) (string, error) {
	if sandbox != "" {
		ref, err := sc.sandbox(sandbox)
		return ref.Record, err
	}
	e, err := sc.env(env)
	if err != nil {
		return "", err
	}
	if id := componentRecord(e.Records, component); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("env of step %s has no sandbox of its own for component %q (its records: %s; a VM-mode env's components have none)",
		env, component, strings.Join(e.Records, ", "))
}

// componentRecord finds the record of component name among a container-mode deployment's
// records, which deploy names name-<12 hex digits> (lifecycle.NewID); "" if none.
func componentRecord(records []string, name string) string {
	for _, id := range records {
		rest, ok := strings.CutPrefix(id, name+"-")
		if ok && len(rest) == 12 && strings.Trim(rest, "0123456789abcdef") == "" {
			return id
		}
	}
	return ""
}

func (s *script) Run(ctx context.Context, sc *scope) (Result, error) {
	record, err := s.record(sc)
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
		if err := m.WriteFile(ctx, record, to, data); err != nil {
			return Result{}, fmt.Errorf("copy %s into the sandbox: %w", s.Files[to], err)
		}
	}
	res, err := m.Exec(ctx, record, s.Command)
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

package task

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"gopkg.in/yaml.v3"
)

// redacted replaces every secret in what is recorded.
const redacted = "[redacted]"

// sandboxRef is a sandbox a deploy_sandbox step made.
type sandboxRef struct {
	Record, Provider, SandboxID string
	Endpoints                   map[string]string // a published container port -> its address from this host
}

// envRef is a deployment a deploy_env step made, or the gateway a serve_tools step serves in
// this process (local set).
type envRef struct {
	DeployedEnv
	tornDown bool
	local    *localTools // a serve_tools step's: closed, never torn down by a deployer
}

// stepState is one step's state in an episode. outputs hold the real values (secrets too, in
// memory only); rec is what is recorded.
type stepState struct {
	rec     agentenv.StepRecord
	outputs map[string]string
	rows    []Row
}

// episode is one run of one task instance.
type episode struct {
	r      *Runner
	t      *Task
	opts   RunOptions
	id     string
	num    int // 1-based over the Run call
	total  int
	seed   map[string]string
	fields map[string]*yaml.Node // each step's fields with placeholders filled
	log    *slog.Logger
	emit   func(Event)

	mu        sync.Mutex
	states    map[string]*stepState
	sandboxes map[string]sandboxRef
	envs      map[string]*envRef
	envOrder  []string
	secrets   []string
	warnings  []string
	runDir    string
	doc       agentenv.Run

	saveMu sync.Mutex // orders ledger writes of the run document
}

// scope is what a running step sees of its episode.
type scope struct {
	e   *episode
	s   *StepSpec
	log *slog.Logger
}

// sandbox returns the sandbox made by the deploy_sandbox step id.
func (sc *scope) sandbox(id string) (sandboxRef, error) {
	sc.e.mu.Lock()
	defer sc.e.mu.Unlock()
	sb, ok := sc.e.sandboxes[id]
	if !ok {
		return sandboxRef{}, fmt.Errorf("step %s made no sandbox%s", id, sc.e.failure(id))
	}
	return sb, nil
}

// env returns the deployment made by the deploy_env step id.
func (sc *scope) env(id string) (DeployedEnv, error) {
	sc.e.mu.Lock()
	defer sc.e.mu.Unlock()
	env, ok := sc.e.envs[id]
	switch {
	case !ok:
		return DeployedEnv{}, fmt.Errorf("step %s deployed no env%s", id, sc.e.failure(id))
	case env.tornDown:
		return DeployedEnv{}, fmt.Errorf("env of step %s was torn down", id)
	}
	return env.DeployedEnv, nil
}

// failure explains why step id has nothing to offer; e.mu is held.
func (e *episode) failure(id string) string {
	st := e.states[id]
	if st == nil {
		return ""
	}
	if st.rec.Error != "" {
		return fmt.Sprintf(" (it %s: %s)", st.rec.Status, st.rec.Error)
	}
	return fmt.Sprintf(" (it is %s)", st.rec.Status)
}

// state returns a copy of step id's state.
func (sc *scope) state(id string) stepState {
	sc.e.mu.Lock()
	defer sc.e.mu.Unlock()
	st := sc.e.states[id]
	if st == nil {
		return stepState{}
	}
	return stepState{rec: st.rec, outputs: st.outputs, rows: st.rows}
}

// path resolves p against the task file's folder.
func (sc *scope) path(p string) string {
	if filepath.IsAbs(p) || sc.e.t.Dir == "" {
		return p
	}
	return filepath.Join(sc.e.t.Dir, p)
}

// runDir returns the run's folder, creating it on first use.
func (sc *scope) runDir() (string, error) { return sc.e.folder() }

// folder returns the run's folder, creating it on first use.
func (e *episode) folder() (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.runDir != "" {
		return e.runDir, nil
	}
	base := e.r.Workdir
	if base == "" {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "runs", e.id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("run folder: %w", err)
	}
	e.runDir = dir
	return dir, nil
}

// secret registers v as a secret: it is redacted from everything recorded.
func (sc *scope) secret(v string) {
	if len(v) < 4 {
		return // too short to redact without mangling ordinary text
	}
	sc.e.mu.Lock()
	sc.e.secrets = append(sc.e.secrets, v)
	sc.e.mu.Unlock()
}

// redact replaces every known secret in s; e.mu is held.
func (e *episode) redact(s string) string {
	for _, sec := range e.secrets {
		s = strings.ReplaceAll(s, sec, redacted)
	}
	return s
}

// lookup returns output name of step id, for ${steps.<id>.outputs.<name>}.
func (e *episode) lookup(id, name string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.states[id]
	if st == nil {
		return "", fmt.Errorf("no step %s", id)
	}
	v, ok := st.outputs[name]
	if !ok {
		return "", fmt.Errorf("step %s wrote no output %s%s", id, name, e.failure(id))
	}
	return v, nil
}

// transition records step s's new status and emits an event; the ledger write follows.
func (e *episode) transition(ctx context.Context, s *StepSpec, fn func(st *stepState)) {
	e.mu.Lock()
	st := e.states[s.ID]
	fn(st)
	st.rec.Error = e.redact(st.rec.Error)
	ev := Event{Kind: EventStep, Time: time.Now(), Run: e.id, Episode: e.num, Episodes: e.total,
		Step: s.ID, Type: s.Type, Status: string(st.rec.Status), Score: st.rec.Score, Error: st.rec.Error}
	if !st.rec.Ended.IsZero() {
		ev.Elapsed = st.rec.Ended.Sub(st.rec.Started)
	}
	if q, err := time.ParseDuration(st.rec.Outputs["queue_wait"]); err == nil && s.Type == TypeDeployEnv {
		ev.Queued = q
	}
	e.mu.Unlock()
	e.emit(ev)
	e.save(ctx)
}

// setOutputs stores a step's outputs: real values in memory, secrets redacted in the record.
func (e *episode) setOutputs(s *StepSpec, st *stepState, res Result) {
	k := e.t.kinds[s.Type]
	st.outputs = map[string]string{}
	if len(res.Outputs) > 0 {
		st.rec.Outputs = map[string]string{}
	}
	for name, v := range res.Outputs {
		st.outputs[name] = v
		if o, _ := k.output(name); o.Type == OutputSecret && v != "" {
			st.rec.Outputs[name] = redacted
			continue
		}
		st.rec.Outputs[name] = e.redact(v)
	}
	st.rows = res.Rows
	st.rec.Score = res.Score
	if k.verifier {
		if res.Score == nil {
			zero := 0.0
			st.rec.Score = &zero
		}
		if st.rec.Outputs == nil {
			st.rec.Outputs = map[string]string{}
		}
		st.outputs["score"] = formatScore(*st.rec.Score)
		st.rec.Outputs["score"] = st.outputs["score"]
	}
}

// save writes the run document. A failing write is logged and kept as a warning of the
// episode; it never stops the run and never panics. The write runs on its own bound even after
// a hard stop (a second Ctrl-C): that stop ends the waits for teardowns, and the record that
// says how the episode ended is what must not be lost with them.
func (e *episode) save(ctx context.Context) {
	e.saveMu.Lock()
	defer e.saveMu.Unlock()
	e.mu.Lock()
	doc := e.doc
	doc.Steps = make([]agentenv.StepRecord, len(e.t.Steps))
	for i, s := range e.t.Steps {
		doc.Steps[i] = e.states[s.ID].rec
	}
	doc.Error = e.redact(doc.Error)
	e.mu.Unlock()
	wctx, cancel := cleanup.Detached(ctx, 10*time.Second)
	defer cancel()
	if err := putRun(wctx, e.r.runs(), doc); err != nil {
		e.mu.Lock()
		msg := "ledger: write run record: " + e.redact(err.Error())
		if len(e.warnings) == 0 || e.warnings[len(e.warnings)-1] != msg {
			e.warnings = append(e.warnings, msg)
		}
		e.mu.Unlock()
		e.log.Warn("run record not written", "err", err)
	}
}

// putRun writes doc, turning a panic of the store into an error.
func putRun(ctx context.Context, runs agentenv.DocStore[agentenv.Run], doc agentenv.Run) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	if runs == nil {
		return fmt.Errorf("no ledger: %w", agentenv.ErrInvalid)
	}
	return runs.Put(ctx, doc)
}

// marshal is json.Marshal for outputs; values that cannot be marshalled become "null".
func marshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "null"
	}
	return string(b)
}

package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/internal/testproc"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/process"
	"github.com/agentenv/agentenv/task"
)

// helloTask is the hello example's task file, relative to this package.
var helloTask, _ = filepath.Abs("../examples/hello/task.yaml")

// placeholderTask needs <who> filled.
const placeholderTask = `name: greet
steps:
  - id: sandbox
    type: deploy_sandbox
    provider: process
  - id: greeting
    type: write_file
    sandbox: sandbox
    path: greeting.txt
    content: "hello <who>\n"
  - id: check
    type: file_contains
    sandbox: sandbox
    path: greeting.txt
    contains: hello ada
`

type rig struct {
	ledger agentenv.Ledger
	proc   *process.Provider
	runner *Runner
	dir    string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir := t.TempDir()
	l, err := bolt.Open(t.Context(), filepath.Join(dir, "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	proc, err := process.New(process.Config{Root: filepath.Join(dir, "sandboxes")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := lifecycle.New(lifecycle.Config{Ledger: l, Providers: map[string]agentenv.Provider{"process": proc}, ReclaimWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tr := &task.Runner{Manager: m, Ledger: l, Workdir: filepath.Join(dir, "work"), DrainTimeout: 5 * time.Second}
	return &rig{ledger: l, proc: proc, dir: dir, runner: &Runner{Tasks: tr}}
}

func (r *rig) write(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// assertNothing fails t if the ledger holds any record or run document.
func (r *rig) assertNothing(t *testing.T) {
	t.Helper()
	recs, _ := r.ledger.List(t.Context(), agentenv.Filter{})
	runs, _ := r.ledger.Runs().List(t.Context(), nil, 0)
	if len(recs) > 0 || len(runs) > 0 {
		t.Errorf("ledger holds %d records and %d run documents, want none", len(recs), len(runs))
	}
}

func (r *rig) assertClean(t *testing.T) {
	t.Helper()
	recs, _ := r.ledger.List(t.Context(), agentenv.Filter{})
	for _, rec := range recs {
		if rec.State != agentenv.StateGone {
			t.Errorf("record %s is %s, want gone", rec.ID, rec.State)
		}
	}
	if entries, _ := os.ReadDir(r.proc.Root()); len(entries) > 0 {
		t.Errorf("%d work folders left", len(entries))
	}
}

func TestIsEval(t *testing.T) {
	for src, want := range map[string]bool{
		"name: x\ntasks:\n  - task: a\n":  true,
		"name: x\nsteps: []\n":            false,
		"name: x\nsteps: []\ntasks: []\n": false,
		"- a\n":                           false,
		"{":                               false,
	} {
		if got := IsEval([]byte(src)); got != want {
			t.Errorf("IsEval(%q) = %v, want %v", src, got, want)
		}
	}
}

func TestParseErrorsNameFileLineField(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ name, src, want string }{
		{"missing task", "name: x\ntasks:\n  - task: nope.yaml\n", "bad.yaml:3: tasks[0].task: task " + filepath.Join(dir, "nope.yaml") + ": no such file or folder"},
		{"unknown field", "name: x\ntasks:\n  - task: " + helloTask + "\n    kk: 2\n", "bad.yaml:4: tasks[0].kk: unknown field"},
		{"bad k", "name: x\ntasks:\n  - task: " + helloTask + "\n    k: 0\n", "bad.yaml:4: tasks[0].k: want at least 1"},
		{"no tasks", "name: x\ntasks: []\n", "tasks: want at least one task"},
		{"no name", "tasks:\n  - task: " + helloTask + "\n", "bad.yaml:1: name: missing field"},
		{"bad override", "name: x\ntasks:\n  - task: " + helloTask + "\n    overrides: {model: {nme: x}}\n", "tasks[0].overrides.model.nme: unknown field"},
		{"missing seeds", "name: x\ntasks:\n  - task: " + helloTask + "\n    seeds: s.csv\n", "bad.yaml:4: tasks[0].seeds: seeds file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(dir, "bad.yaml"), []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, agentenv.ErrInvalid) {
				t.Fatalf("Parse = %v, want an invalid-input error containing %q", err, c.want)
			}
		})
	}
	// A task file that does not load: its own error, with where the eval names it.
	bad := filepath.Join(dir, "broken.yaml")
	os.WriteFile(bad, []byte("name: b\nsteps:\n  - id: a\n    type: nope\n"), 0o600)
	_, err := Parse(filepath.Join(dir, "e.yaml"), []byte("name: x\ntasks:\n  - task: broken.yaml\n"))
	if err == nil || !strings.Contains(err.Error(), "e.yaml:3: tasks[0].task: ") || !strings.Contains(err.Error(), "broken.yaml:3: steps[0].type") {
		t.Fatalf("Parse = %v, want the eval's line and the task file's", err)
	}
}

func TestRunRefusesBadInputBeforeAnything(t *testing.T) {
	r := newRig(t)
	r.write(t, "greet.yaml", placeholderTask)
	f, err := Load(r.write(t, "e.yaml", "name: x\ntasks:\n  - task: "+helloTask+"\n  - task: greet.yaml\n    k: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.runner.Run(t.Context(), f, Options{})
	if err == nil || !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "e.yaml:4: tasks[1]") || !strings.Contains(err.Error(), "who") {
		t.Fatalf("Run = %v, want the placeholder error naming tasks[1]", err)
	}
	r.assertNothing(t)

	// The override fills it.
	f, err = Load(r.write(t, "e2.yaml", "name: x\nconcurrency: 3\ntasks:\n  - task: "+helloTask+"\n  - task: greet.yaml\n    k: 2\n    overrides: {placeholders: {who: ada}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.runner.Run(t.Context(), f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed() || res.Overall.Passed != 3 || len(res.Lines) != 3 {
		t.Fatalf("result = %+v, want 3 passed", res)
	}
	r.assertClean(t)
}

// TestResumeRunsOnlyUnfinished runs a group, makes three of its slots unfinished as a crash,
// a cancellation and an infrastructure error would leave them, and resumes: only those run
// again, the finished ones keep their runs, and the totals are the uninterrupted run's.
func TestResumeRunsOnlyUnfinished(t *testing.T) {
	r := newRig(t)
	f, err := Load(r.write(t, "e.yaml", "name: x\nconcurrency: 2\ntasks:\n  - task: "+helloTask+"\n    k: 3\n  - task: "+helloTask+"\n    k: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	first, err := r.runner.Run(ctx, f, Options{})
	if err != nil || first.Overall.Passed != 5 {
		t.Fatalf("Run = %v, %+v", err, first.Overall)
	}
	g := first.Group
	if _, err := r.runner.Resume(ctx, g.ID, Options{}); err != nil {
		t.Fatalf("Resume of a finished group = %v", err)
	}
	if again, _ := Collect(ctx, r.ledger, g); again.Replaced != 0 {
		t.Fatalf("a finished group's resume replaced %d episodes", again.Replaced)
	}

	// Doctor three slots: interrupted (still running), cancelled, infra error.
	keep := map[string]bool{}
	for i, l := range first.Lines {
		doc, err := r.ledger.Runs().Get(ctx, l.Run)
		if err != nil {
			t.Fatal(err)
		}
		switch i {
		case 0:
			doc.Status = agentenv.RunRunning
			delete(doc.Attrs, "outcome")
		case 2:
			doc.Status, doc.Attrs["outcome"] = agentenv.RunCancelled, string(task.OutcomeCancelled)
		case 4:
			doc.Status, doc.Attrs["outcome"] = agentenv.RunError, string(task.OutcomeError)
		default:
			keep[l.Run] = true
			continue
		}
		if err := r.ledger.Runs().Put(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	gd, _ := Store{r.ledger}.Get(ctx, g.ID)
	gd.Status, gd.Owner = agentenv.RunRunning, agentenv.Owner{Host: "gone@x", PID: 1}
	me, _ := lifecycle.CurrentOwner()
	gd.Owner.Host = me.Host
	gd.Owner.Start = -1 // no process has this start time: the owner is dead
	if err := (Store{r.ledger}).Put(ctx, gd); err != nil {
		t.Fatal(err)
	}
	runs, _ := Store{r.ledger}.Episodes(ctx, g)
	if p := Pending(gd, runs); len(p) != 3 {
		t.Fatalf("Pending = %v, want 3 slots", p)
	}

	res, err := r.runner.Resume(ctx, g.ID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Overall.Passed != 5 || res.Replaced != 3 || res.Group.Status != agentenv.RunCompleted {
		t.Fatalf("resumed = %+v (replaced %d, status %s), want 5 passed, 3 replaced", res.Overall, res.Replaced, res.Group.Status)
	}
	if got, want := res.Tasks[0].PassAt, first.Tasks[0].PassAt; !equalMap(got, want) {
		t.Errorf("pass@k after resume = %v, uninterrupted %v", got, want)
	}
	for i, l := range res.Lines {
		if keep[first.Lines[i].Run] != (l.Run == first.Lines[i].Run) {
			t.Errorf("slot %d: run %s then %s; finished ones must stay, unfinished ones be replaced", i, first.Lines[i].Run, l.Run)
		}
	}
	old, _ := r.ledger.Runs().Get(ctx, first.Lines[0].Run)
	if old.Status != agentenv.RunCancelled || old.Attrs[AttrResumedBy] != g.ID {
		t.Errorf("interrupted run after resume: %s %v", old.Status, old.Attrs)
	}
	r.assertClean(t)
}

func TestResumeRefusesALiveGroupAndAChangedFile(t *testing.T) {
	r := newRig(t)
	path := r.write(t, "e.yaml", "name: x\ntasks:\n  - task: "+helloTask+"\n")
	f, _ := Load(path)
	res, err := r.runner.Run(t.Context(), f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := res.Group
	me, _ := lifecycle.CurrentOwner()
	g.Status, g.Owner = agentenv.RunRunning, me
	(Store{r.ledger}).Put(t.Context(), g)
	if _, err := r.runner.Resume(t.Context(), g.ID, Options{}); !errors.Is(err, agentenv.ErrConflict) {
		t.Errorf("Resume of a live group = %v, want a conflict", err)
	}
	g.Owner = agentenv.Owner{}
	(Store{r.ledger}).Put(t.Context(), g)
	r.write(t, "e.yaml", "name: x\ntasks:\n  - task: "+helloTask+"\n    k: 2\n")
	if _, err := r.runner.Resume(t.Context(), g.ID, Options{}); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "changed") {
		t.Errorf("Resume after the file changed = %v, want invalid", err)
	}
}

func TestCostCapStopsStarting(t *testing.T) {
	tr := newTracker(Group{ID: "g", Tasks: []GroupTask{{Task: "t"}}}, [][]task.Slot{{{Instance: 0, Attempt: 1}, {Instance: 0, Attempt: 2}}}, nil)
	admit := tr.admitter(context.Background(), 1, 0.5)
	release, err := admit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tr.done(0, task.Episode{Run: "r1", Outcome: task.OutcomePassed, Steps: []agentenv.StepRecord{{Type: task.TypePromptAgent, Outputs: map[string]string{"cost_usd": "0.6"}}}})
	release()
	if _, err := admit(context.Background()); !errors.Is(err, ErrCostCap) || !tr.capped() {
		t.Fatalf("admit after $0.6 of $0.5 = %v, want the cost cap", err)
	}
}

func TestStatusLine(t *testing.T) {
	s := Status{Group: "g", Total: 10, Done: 4, Running: 2, Queued: 4, Passed: 3, Finished: 4, ETA: 90 * time.Second}
	if got, want := s.String(), "g  4/10 done  2 running  4 queued  pass 75.0%  eta 1m30s"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

// TestExportChatJSONL exports an episode whose trajectory has two turns of tool calls and
// checks each line against go-openai's chat message type: roles, every tool result answering
// a call of the assistant message before it, secrets redacted.
func TestExportChatJSONL(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	traj := filepath.Join(r.dir, "agent.trajectory.ndjson")
	tr, err := agent.Create(traj)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.Repeat("ab", 24)
	tr.Write(agent.Line{Kind: agent.KindPrompt, Agent: "openai", Text: "add a note"})
	tr.Write(agent.Line{Kind: agent.KindModel, Turn: 1, Model: "gpt-x", Text: "", ToolCalls: 2})
	tr.Write(agent.Line{Kind: agent.KindToolCall, Turn: 1, Tool: "notes.add_note", CallID: "c1", Arguments: json.RawMessage(`{"title":"a"}`)})
	tr.Write(agent.Line{Kind: agent.KindToolCall, Turn: 1, Tool: "search", CallID: "c2", Arguments: json.RawMessage(`{"q":"` + token + `"}`)})
	tr.Write(agent.Line{Kind: agent.KindToolResult, Turn: 1, Tool: "notes.add_note", CallID: "c1", Text: "ok"})
	tr.Write(agent.Line{Kind: agent.KindToolResult, Turn: 1, Tool: "search", CallID: "c2", Text: "key sk-secret-value found"})
	tr.Write(agent.Line{Kind: agent.KindModel, Turn: 2, Model: "gpt-x", Text: "done"})
	tr.Write(agent.Line{Kind: agent.KindResponse, Text: "done"})
	tr.Write(agent.Line{Kind: agent.KindStop, Text: "answer"})
	tr.Close()

	one := 1.0
	g := Group{ID: "group-1", Name: "x", Tasks: []GroupTask{{Task: "notes", File: "notes.yaml", K: 2, Instances: 1}}, Status: agentenv.RunCompleted, Created: time.Now()}
	if err := (Store{r.ledger}).Put(ctx, g); err != nil {
		t.Fatal(err)
	}
	for i, st := range []agentenv.RunStatus{agentenv.RunCompleted, agentenv.RunCancelled} {
		doc := agentenv.Run{ID: "run-" + string(rune('a'+i)), Task: "notes", Status: st, Score: &one, Created: time.Now(),
			Attrs: map[string]string{AttrGroup: g.ID, AttrGroupTask: "0", AttrInstance: "0", AttrAttempt: string(rune('1' + i)), "seed.who": "ada"},
			Steps: []agentenv.StepRecord{
				{ID: "agent", Type: task.TypePromptAgent, Status: agentenv.StepPassed, Outputs: map[string]string{"trajectory": traj}},
				{ID: "check", Type: task.TypeToolResult, Status: agentenv.StepPassed, Score: &one},
			}}
		if err := r.ledger.Runs().Put(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	n, err := Export(ctx, r.ledger, g, FormatChatJSONL, &buf, Redactor{Values: []string{"sk-secret-value"}})
	if err != nil || n != 1 {
		t.Fatalf("Export = %d, %v; want 1 finished episode", n, err)
	}
	text := buf.String()
	if strings.Contains(text, token) || strings.Contains(text, "sk-secret-value") {
		t.Errorf("export holds a secret: %s", text)
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for _, line := range lines {
		var rec struct {
			Messages []json.RawMessage `json:"messages"`
			Score    *float64          `json:"score"`
			Metadata Metadata          `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Score == nil || *rec.Score != 1 || rec.Metadata.Model != "gpt-x" || rec.Metadata.Seed["who"] != "ada" || rec.Metadata.Attempt != 1 {
			t.Errorf("record = %+v", rec)
		}
		var roles []string
		calls := map[string]bool{}
		for _, m := range rec.Messages {
			var p openai.ChatCompletionMessage
			if err := json.Unmarshal(m, &p); err != nil {
				t.Fatalf("message %s: %v", m, err)
			}
			if p.Role == "" {
				t.Fatalf("message %s has no role", m)
			}
			roles = append(roles, p.Role)
			switch p.Role {
			case openai.ChatMessageRoleAssistant:
				for _, c := range p.ToolCalls {
					if c.ID == "" || c.Type != openai.ToolTypeFunction || c.Function.Name == "" || !json.Valid([]byte(c.Function.Arguments)) {
						t.Errorf("tool call %s", m)
						continue
					}
					calls[c.ID] = true
				}
			case openai.ChatMessageRoleTool:
				if !calls[p.ToolCallID] {
					t.Errorf("tool message answers %q, no call before it", p.ToolCallID)
				}
				delete(calls, p.ToolCallID)
			}
		}
		if got := strings.Join(roles, ","); got != "user,assistant,tool,tool,assistant" {
			t.Errorf("roles = %s", got)
		}
		if len(calls) > 0 {
			t.Errorf("calls without a result: %v", calls)
		}
	}
	buf.Reset()
	if n, err := Export(ctx, r.ledger, g, FormatCSV, &buf, Redactor{}); err != nil || n != 1 || !strings.Contains(buf.String(), "group-1,notes,0,1,run-a,passed,1,") {
		t.Errorf("csv = %d, %v:\n%s", n, err, buf.String())
	}
	if _, err := Export(ctx, r.ledger, g, "xml", &buf, Redactor{}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Export(xml) = %v", err)
	}
}

func equalMap(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

type mapSource map[string]string

func (m mapSource) Get(k string) (string, error) {
	if v, ok := m[k]; ok {
		return v, nil
	}
	return "", errors.New("unset")
}

func TestOverrides(t *testing.T) {
	dir := t.TempDir()
	f, err := Parse(filepath.Join(dir, "e.yaml"), []byte("name: x\ntasks:\n  - task: "+helloTask+"\n    overrides:\n      placeholders: {who: ada}\n      provider: docker\n      model: {name: small, input_price: 0.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := f.Tasks[0].Overrides
	if o.Placeholders["who"] != "ada" || o.Provider != "docker" || o.Model["name"] != "small" || o.Model["input_price"] != "0.5" {
		t.Fatalf("overrides = %+v", o)
	}
	ms := modelSource{base: mapSource{"model.name": "big", "model.base_url": "http://m/v1", "model.judge.name": "judge"}, over: o.Model}
	for key, want := range map[string]string{"model.name": "small", "model.base_url": "http://m/v1", "model.input_price": "0.5", "model.judge.name": "judge"} {
		if got, err := ms.Get(key); err != nil || got != want {
			t.Errorf("Get(%s) = %q, %v; want %q", key, got, err, want)
		}
	}
	if _, err := Parse(filepath.Join(dir, "e.yaml"), []byte("name: x\ntasks:\n  - task: "+helloTask+"\n    overrides: {model: {input_price: cheap}}\n")); err == nil || !strings.Contains(err.Error(), "e.yaml:4: tasks[0].overrides.model.input_price: want a number") {
		t.Errorf("bad price: %v", err)
	}
}

func TestExampleEvalsLoad(t *testing.T) {
	paths, _ := filepath.Glob("../examples/evals/*.yaml")
	if len(paths) < 3 {
		t.Fatalf("examples/evals has %d files", len(paths))
	}
	for _, p := range paths {
		if f, err := Load(p); err != nil || len(f.Tasks) == 0 {
			t.Errorf("Load(%s) = %v", p, err)
		}
	}
}

// TestHoldKept: what a Keep run left up is torn down on the Ctrl-C that ends the hold, and
// each episode's receipt is written to its run document although that context has ended.
func TestHoldKept(t *testing.T) {
	r := newRig(t)
	tk, err := task.LoadPath(helloTask)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.runner.Run(t.Context(), ForTask(tk, 2, 2, "", Overrides{}), Options{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(r.proc.Root()); len(entries) != 2 {
		t.Fatalf("a Keep run left %d work folders, want 2", len(entries))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the Ctrl-C that ends the wait
	if err := r.runner.HoldKept(ctx, &res); err != nil {
		t.Fatal(err)
	}
	for _, ep := range res.Live[0].Episodes {
		doc, err := r.ledger.Runs().Get(t.Context(), ep.Run)
		if err != nil || doc.Receipt == nil || ep.Receipt == nil || len(doc.Receipt.Items) == 0 {
			t.Errorf("run %s: receipt %v in the result, %v in the run document (%v); want both", ep.Run, ep.Receipt, doc.Receipt, err)
		}
	}
	r.assertClean(t)
}

// TestResumeReadsABundleGroupThroughFetch: a group run from a bundle's folder resumes on a
// machine where that folder is gone, reading the same files from the folder Fetch gives (the
// bundle pulled again), its episodes given the bundle's pinned images; without Fetch, the
// missing folder is the error.
func TestResumeReadsABundleGroupThroughFetch(t *testing.T) {
	r := newRig(t)
	hello, err := os.ReadFile(helloTask)
	if err != nil {
		t.Fatal(err)
	}
	tree := func(name string) string {
		dir := filepath.Join(r.dir, name, "sha256-abc")
		if err := os.MkdirAll(filepath.Join(dir, "tasks"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "tasks", "hello.yaml"), bytes.Replace(hello, []byte("    provider: process\n"), []byte("    provider: process\n    image: host\n"), 1), 0o644)
		os.WriteFile(filepath.Join(dir, "e.yaml"), []byte("name: b\ntasks:\n  - task: tasks/hello.yaml\n    k: 2\n"), 0o644)
		return dir
	}
	first := tree("submitter")
	f, err := Load(filepath.Join(first, "e.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const ref, digest = "127.0.0.1:5000/evals/b:v1", "sha256:abc"
	res, err := r.runner.Run(t.Context(), f, Options{Bundle: ref, BundleDigest: digest, BundleTree: first})
	if err != nil || res.Overall.Passed != 2 {
		t.Fatalf("Run = %v, %+v", err, res.Overall)
	}
	doc, err := r.ledger.Runs().Get(t.Context(), res.Lines[0].Run)
	if err != nil {
		t.Fatal(err)
	}
	doc.Status = agentenv.RunRunning // as an interrupted run leaves it
	delete(doc.Attrs, "outcome")
	r.ledger.Runs().Put(t.Context(), doc)
	os.RemoveAll(first)

	if _, err := r.runner.Resume(t.Context(), res.Group.ID, Options{}); err == nil {
		t.Fatal("Resume with the bundle's folder gone and no Fetch succeeded")
	}
	second := tree("worker")
	var asked []string
	pin := "registry.example/host@sha256:" + strings.Repeat("ab", 32)
	r.runner.Fetch = func(_ context.Context, ref, digest string) (Fetched, error) {
		asked = append(asked, ref+"@"+digest)
		return Fetched{Tree: second, Pinned: map[string]string{"host": pin}}, nil
	}
	var logs testproc.Buffer
	r.runner.Tasks.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	again, err := r.runner.Resume(t.Context(), res.Group.ID, Options{})
	if err != nil || again.Overall.Passed != 2 {
		t.Fatalf("Resume through Fetch = %v, %+v", err, again.Overall)
	}
	if !strings.Contains(logs.String(), "ran host as named, not "+pin) {
		t.Errorf("the resumed episode's sandbox was not given the bundle's pin %s:\n%s", pin, logs.String())
	}
	if len(asked) == 0 || asked[0] != ref+"@"+digest {
		t.Errorf("Fetch was asked %v, want %s@%s", asked, ref, digest)
	}
	r.assertClean(t)
}

package task_test

import (
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent/model/modeltest"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/task"
)

// faultRig is a rig whose fake provider follows plan.
func faultRig(tb testing.TB, plan *fault.Plan) *rig {
	tb.Helper()
	dir := tb.TempDir()
	l, err := bolt.Open(tb.Context(), filepath.Join(dir, "ledger.bolt"), nil)
	if err != nil {
		tb.Fatalf("bolt.Open = %v", err)
	}
	tb.Cleanup(func() { l.Close() })
	fk := fake.New("fake")
	m, err := lifecycle.New(lifecycle.Config{Ledger: l, Providers: map[string]agentenv.Provider{"fake": fault.WrapProvider(fk, plan)}, ReclaimWait: 2 * time.Second})
	if err != nil {
		tb.Fatalf("lifecycle.New = %v", err)
	}
	r := &rig{ledger: l, fake: fk, workdir: filepath.Join(dir, "work")}
	r.runner = &task.Runner{Manager: m, Ledger: l, Workdir: r.workdir, DrainTimeout: 5 * time.Second,
		Progress: func(ev task.Event) { r.events = append(r.events, ev) }}
	return r
}

func (r *rig) assertFakeClean(tb testing.TB) {
	tb.Helper()
	recs, err := r.ledger.List(tb.Context(), agentenv.Filter{})
	if err != nil {
		tb.Fatal(err)
	}
	for _, rec := range recs {
		if rec.State != agentenv.StateGone {
			tb.Errorf("record %s (%s) is %s, want gone", rec.ID, rec.Role, rec.State)
		}
	}
	if live := r.fake.Live(); len(live) > 0 {
		tb.Errorf("fake provider still has %v", live)
	}
}

const flakyTask = `
name: flaky
retries: {infra: 1}
steps:
- {id: box, type: deploy_sandbox, provider: fake, image: busybox}
- {id: put, type: write_file, sandbox: box, path: /out.txt, content: hello}
- {id: check, type: file_contains, sandbox: box, path: /out.txt, contains: hello}
`

// An infra error on attempt 1 (the create fails) is retried from scratch: the episode passes,
// the failed attempt is in the run record with its error and receipt, nothing is left.
func TestEpisodeRetry(t *testing.T) {
	r := faultRig(t, fault.NewPlan(fault.Rule{Op: agentenv.OpCreate, Call: 1, Action: fault.Error}))
	tk := mustParse(t, "flaky.yaml", flakyTask)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomePassed || sum.Passed != 1 || sum.PassAt["1"] != 1 {
		t.Fatalf("episode = %s %q, want passed after a retry", ep.Outcome, ep.Error)
	}
	doc, err := r.ledger.Runs().Get(t.Context(), ep.Run)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Attempts) != 1 || len(ep.Attempts) != 1 {
		t.Fatalf("attempts = %+v (summary %+v), want the one failed attempt", doc.Attempts, ep.Attempts)
	}
	a := doc.Attempts[0]
	if a.Attempt != 1 || a.Step != "box" || a.ErrorKind != agentenv.StepErrorInfra || !strings.Contains(a.Error, "injected fault") || a.Receipt == nil {
		t.Errorf("attempt = %+v, want attempt 1 of step box, infra, injected fault, a receipt", a)
	}
	if doc.Status != agentenv.RunCompleted {
		t.Errorf("run status = %s", doc.Status)
	}
	var retries int
	for _, ev := range r.events {
		if ev.Kind == task.EventRetry {
			retries++
		}
	}
	if retries != 1 {
		t.Errorf("%d retry events, want 1", retries)
	}
	r.assertFakeClean(t)
}

// Without retries the same fault makes the episode an error: no sample, counted apart.
func TestEpisodeErrorWithoutRetries(t *testing.T) {
	r := faultRig(t, fault.NewPlan(fault.Rule{Op: agentenv.OpCreate, Call: 1, Action: fault.Error}))
	tk := mustParse(t, "flaky.yaml", flakyTask)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{Retries: -1, K: 2})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if sum.Errors != 1 || sum.Passed != 1 || sum.Scored != 1 || sum.MeanScore != 1 || sum.PassAt["1"] != 1 {
		t.Errorf("summary = errors %d passed %d scored %d mean %v pass@ %v; want the error left out", sum.Errors, sum.Passed, sum.Scored, sum.MeanScore, sum.PassAt)
	}
	for _, ep := range sum.Episodes {
		if ep.Outcome == task.OutcomeError {
			doc, _ := r.ledger.Runs().Get(t.Context(), ep.Run)
			if doc.Status != agentenv.RunError || doc.Steps[0].ErrorKind != agentenv.StepErrorInfra {
				t.Errorf("error run = %s, step 0 kind %q", doc.Status, doc.Steps[0].ErrorKind)
			}
		}
	}
	r.assertFakeClean(t)
}

const judgeTask = `
name: judged
steps:
- id: grade
  type: judge
  rubric: The answer names the capital of France.
  inputs: {answer: "Paris is the capital."}
`

// TestJudge grades against the scripted model server (a test double for a model endpoint):
// a score in a code block passes with its prompt, answer and usage recorded; a refusal is an
// infra error, not a 0; no [model.judge] is bad input before anything runs.
func TestJudge(t *testing.T) {
	srv := modeltest.New(t,
		modeltest.Reply{Text: "```json\n{\"score\": 1, \"reasons\": \"names Paris\"}\n```", InputTokens: 50, OutputTokens: 9},
		modeltest.Reply{Text: "I'm sorry, I can't grade that."})
	r := newRig(t, nil)
	r.runner.Model = modelSettings{"model.judge.base_url": srv.OpenAIURL(), "model.judge.name": "judge-1", "model.judge.api_key": "sk-judge-secret"}
	tk := mustParse(t, "judged.yaml", judgeTask)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{K: 2, Retries: -1})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ok, refused := sum.Episodes[0], sum.Episodes[1]
	if ok.Outcome != task.OutcomePassed {
		t.Fatalf("first episode = %s %q, want passed", ok.Outcome, ok.Error)
	}
	out := ok.Steps[0].Outputs
	if !strings.Contains(out["prompt"], "capital of France") || !strings.Contains(out["prompt"], "<answer>\nParis") ||
		out["reasons"] != "names Paris" || out["input_tokens"] != "50" || out["output_tokens"] != "9" || !strings.Contains(out["answer"], `"score": 1`) {
		t.Errorf("judge outputs = %v", out)
	}
	if refused.Outcome != task.OutcomeError || refused.Steps[0].ErrorKind != agentenv.StepErrorInfra || !strings.Contains(refused.Error, "judge gave no score") {
		t.Errorf("refused episode = %s %q (%s), want error", refused.Outcome, refused.Error, refused.Steps[0].ErrorKind)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Body["model"] != "judge-1" || reqs[0].Auth != "Bearer sk-judge-secret" {
		t.Errorf("requests = %+v", reqs)
	}
	if strings.Contains(marshalText(t, sum), "sk-judge-secret") {
		t.Error("the judge's API key is in the summary")
	}

	bare := newRig(t, nil)
	bare.runner.Model = modelSettings{}
	_, err = bare.runner.Run(t.Context(), tk, task.RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "judged.yaml:4: step grade") || !strings.Contains(err.Error(), "model.judge.base_url") {
		t.Errorf("Run without [model.judge] = %v, want a clear error naming the step", err)
	}
	if docs, _ := bare.ledger.Runs().List(t.Context(), nil, 0); len(docs) != 0 {
		t.Errorf("%d runs written for bad input", len(docs))
	}
}

func marshalText(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// A step's retry re-runs its span (retry.from and every step depending on it) after tearing
// down what the span made; a step outside the span, and its sandbox, are kept.
func TestSpanRetry(t *testing.T) {
	r := faultRig(t, fault.NewPlan(fault.Rule{Op: agentenv.OpReadFile, Call: 1, Action: fault.Error}))
	tk := mustParse(t, "span.yaml", `
name: span
steps:
- {id: base, type: deploy_sandbox, provider: fake, image: busybox, depends_on: []}
- {id: box, type: deploy_sandbox, provider: fake, image: busybox, depends_on: []}
- {id: put, type: write_file, sandbox: box, path: /out.txt, content: hello, depends_on: [box]}
- {id: check, type: file_contains, sandbox: box, path: /out.txt, contains: hello, depends_on: [put], retry: {max: 1, from: box}}
- {id: after, type: write_file, sandbox: base, path: /b.txt, content: x, depends_on: [base, check]}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{Retries: -1})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomePassed {
		t.Fatalf("episode = %s %q, want passed after the span's retry", ep.Outcome, ep.Error)
	}
	doc, err := r.ledger.Runs().Get(t.Context(), ep.Run)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Attempts) != 1 {
		t.Fatalf("attempts = %+v, want one", doc.Attempts)
	}
	a := doc.Attempts[0]
	if a.Span != "box..check" || a.Step != "check" || a.ErrorKind != agentenv.StepErrorInfra || !strings.Contains(a.Error, "injected fault") {
		t.Errorf("attempt = %+v", a)
	}
	// What the span made (box's sandbox) went down before the retry; base's did not.
	if a.Receipt == nil || len(a.Receipt.Items) != 1 {
		t.Fatalf("span receipt = %+v, want box's sandbox alone", a.Receipt)
	}
	recs, err := r.ledger.List(t.Context(), agentenv.Filter{Run: ep.Run})
	if err != nil {
		t.Fatal(err)
	}
	roles := map[agentenv.Role]int{}
	for _, rec := range recs {
		roles[rec.Role]++
		if rec.ID == a.Receipt.Items[0].Record && rec.Role != agentenv.TaskRole("box") {
			t.Errorf("the span teardown took %s (%s), want box's sandbox", rec.ID, rec.Role)
		}
	}
	if roles[agentenv.TaskRole("box")] != 2 || roles[agentenv.TaskRole("base")] != 1 {
		t.Errorf("sandboxes by role = %v, want box twice (fresh after the retry), base once (kept)", roles)
	}
	if c := r.fake.Calls(agentenv.OpCreate); c != 3 {
		t.Errorf("%d creates, want 3", c)
	}
	r.assertFakeClean(t)
}

// A step's retry that runs out, or an agent's error, is not retried again.
func TestSpanRetryLimits(t *testing.T) {
	r := faultRig(t, fault.NewPlan(fault.Rule{Op: agentenv.OpReadFile, Call: 0, Action: fault.Error}))
	tk := mustParse(t, "span.yaml", `
name: span
steps:
- {id: box, type: deploy_sandbox, provider: fake, image: busybox}
- {id: check, type: file_contains, sandbox: box, path: /out.txt, contains: hello, retry: {max: 2, from: box}}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{Retries: -1})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	doc, _ := r.ledger.Runs().Get(t.Context(), ep.Run)
	if ep.Outcome != task.OutcomeError || len(doc.Attempts) != 2 || r.fake.Calls(agentenv.OpCreate) != 3 {
		t.Errorf("episode = %s, %d attempts, %d creates; want error after 2 span retries (3 creates)", ep.Outcome, len(doc.Attempts), r.fake.Calls(agentenv.OpCreate))
	}
	r.assertFakeClean(t)

	if _, err := task.Parse("bad.yaml", []byte(`
steps:
- {id: a, type: deploy_sandbox, provider: fake, image: x, depends_on: []}
- {id: b, type: deploy_sandbox, provider: fake, image: x, depends_on: [], retry: {from: a}}
`)); err == nil || !strings.Contains(err.Error(), "bad.yaml:4: steps[1].retry.from") {
		t.Errorf("retry from a step that is not a dependency: %v", err)
	}
}

// TestJudgeEndpointError: a judge endpoint's 5xx is an infra error; with retries the episode
// runs again and the second answer decides.
func TestJudgeEndpointError(t *testing.T) {
	srv := modeltest.New(t) // an empty script: every request is answered 500
	r := newRig(t, nil)
	r.runner.Model = modelSettings{"model.judge.base_url": srv.OpenAIURL(), "model.judge.name": "judge-1"}
	tk := mustParse(t, "judged.yaml", judgeTask)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{Retries: 1})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomeError || len(ep.Attempts) != 1 || !strings.Contains(ep.Error, "500") || len(srv.Requests()) != 2 {
		t.Errorf("episode = %s %q, %d attempts, %d requests; want error after one retry", ep.Outcome, ep.Error, len(ep.Attempts), len(srv.Requests()))
	}
}

// TestScriptVerifier runs script verifiers on the process provider (real commands on this
// host): a report with results, and a command without one scored by its exit code.
func TestScriptVerifier(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "verify.sh"), `echo collecting; echo '{"score": 0.5, "results": [{"name": "a", "passed": true}, {"name": "b", "passed": false}]}'`)
	writeFile(t, filepath.Join(dir, "task.yaml"), `
name: scripted
score: min
steps:
- {id: box, type: deploy_sandbox, provider: process}
- {id: suite, type: script, sandbox: box, files: {verify.sh: verify.sh}, command: [sh, verify.sh]}
- {id: exits, type: script, sandbox: box, command: [sh, -c, "echo oops >&2; exit 3"]}
`)
	tk, err := task.Load(filepath.Join(dir, "task.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, nil)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	steps := map[string]agentenv.StepRecord{}
	for _, s := range ep.Steps {
		steps[s.ID] = s
	}
	if s := steps["suite"]; s.Score == nil || *s.Score != 0.5 || !strings.Contains(s.Outputs["rows"], `"check":"b"`) || !strings.Contains(s.Outputs["stdout"], "collecting") {
		t.Errorf("suite = %+v", s)
	}
	if s := steps["exits"]; s.Score == nil || *s.Score != 0 || s.Outputs["exit_code"] != "3" || s.Outputs["stderr"] != "oops\n" || s.Status != agentenv.StepPassed {
		t.Errorf("exits = %+v", s)
	}
	if ep.Outcome != task.OutcomeScoredBelow || *ep.Score != 0 {
		t.Errorf("episode = %s %v", ep.Outcome, *ep.Score)
	}
	r.assertClean(t)

	if _, err := task.Parse("bad.yaml", []byte("steps:\n- {id: s, type: script, command: [true]}\n")); err == nil || !strings.Contains(err.Error(), "set sandbox") {
		t.Errorf("script without a sandbox: %v", err)
	}
}

// TestJudgeScreenshot gives the judge the last image the agent's trajectory kept (a tool
// result's screenshot), as an image part of its message beside the rubric.
func TestJudgeScreenshot(t *testing.T) {
	g := newNotesGateway(t)
	srv := modeltest.New(t, modeltest.Reply{Text: `{"score": 1, "reasons": "the app is shown"}`})
	r := newRig(t, nil)
	r.runner.Deployer = &fakeDeployer{g: g}
	r.runner.Model = modelSettings{"model.judge.base_url": srv.OpenAIURL(), "model.judge.name": "judge-1", "model.judge.api_key": "k"}
	env, _ := filepath.Abs("../examples/notes/env.yaml")
	tk := mustParse(t, "shot.yaml", `
name: shot
steps:
- {id: env, type: deploy_env, file: `+env+`}
- {id: agent, type: prompt_agent, env: env, agent: scripted, prompt: look, calls: [{tool: screenshot}]}
- {id: grade, type: judge, depends_on: [agent], rubric: The notes app is shown., screenshot: agent}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if ep := sum.Episodes[0]; ep.Outcome != task.OutcomePassed {
		t.Fatalf("episode = %s %q", ep.Outcome, ep.Error)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("judge requests = %d", len(reqs))
	}
	msgs, _ := json.Marshal(reqs[0].Body["messages"])
	want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(notesScreenshot)
	if !strings.Contains(string(msgs), want) || !strings.Contains(string(msgs), "The notes app is shown.") {
		t.Errorf("judge messages = %s, want the rubric and the screenshot", msgs)
	}

	// A judge of a step whose agent kept no image is the verifier's error, not a 0.
	tk = mustParse(t, "noshot.yaml", `
name: noshot
steps:
- {id: env, type: deploy_env, file: `+env+`}
- {id: agent, type: prompt_agent, env: env, agent: scripted, prompt: look, calls: [{tool: search_notes, arguments: {query: x}}]}
- {id: grade, type: judge, depends_on: [agent], rubric: x, screenshot: agent}
`)
	sum, err = r.runner.Run(t.Context(), tk, task.RunOptions{Retries: -1})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if ep := sum.Episodes[0]; ep.Outcome != task.OutcomeError || !strings.Contains(ep.Error, "kept no image") {
		t.Errorf("episode without an image = %s %q, want an error saying no image was kept", ep.Outcome, ep.Error)
	}
}

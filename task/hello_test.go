package task_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

func TestHello(t *testing.T) {
	r := newRig(t, nil)
	sum, err := r.runner.Run(t.Context(), task.Hello(), task.RunOptions{})
	if err != nil {
		t.Fatalf("Run(hello) = %v", err)
	}
	if len(sum.Episodes) != 1 {
		t.Fatalf("Run(hello) ran %d episodes, want 1", len(sum.Episodes))
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomePassed || ep.Score == nil || *ep.Score != 1 {
		t.Errorf("hello: outcome %s score %v error %q, want passed with score 1; steps %+v", ep.Outcome, ep.Score, ep.Error, ep.Steps)
	}
	if !sum.AllPassed() || sum.MeanScore != 1 || sum.PassAt["1"] != 1 {
		t.Errorf("summary = %+v, want all passed, mean 1, pass@1 1", sum)
	}
	if ep.Receipt == nil || len(ep.Receipt.Items) != 1 || !ep.Receipt.Clean() {
		t.Errorf("receipt = %+v, want one sandbox, clean", ep.Receipt)
	}
	if len(ep.Warnings) > 0 {
		t.Errorf("warnings = %v", ep.Warnings)
	}
	r.assertClean(t)

	doc, err := r.ledger.Runs().Get(t.Context(), ep.Run)
	if err != nil {
		t.Fatalf("Runs().Get(%s) = %v", ep.Run, err)
	}
	if doc.Status != agentenv.RunCompleted || doc.Score == nil || *doc.Score != 1 || doc.Receipt == nil || doc.TaskDigest == "" {
		t.Errorf("run record = %+v, want completed, score 1, a receipt and a digest", doc)
	}
	for _, s := range doc.Steps {
		if s.Status != agentenv.StepPassed || s.Started.IsZero() || s.Ended.IsZero() {
			t.Errorf("recorded step %s: %+v, want passed with times", s.ID, s)
		}
	}
	if _, err := os.Stat(r.workdir); !os.IsNotExist(err) {
		t.Errorf("hello made a run folder %s; it writes no trajectory", r.workdir)
	}
	var steps int
	for _, ev := range r.events {
		if ev.Kind == task.EventStep && ev.Status == string(agentenv.StepPassed) {
			steps++
		}
		if ev.String() == "" {
			t.Errorf("event %+v has an empty String", ev)
		}
	}
	if steps != len(task.Hello().Steps) {
		t.Errorf("%d passed step events, want %d", steps, len(task.Hello().Steps))
	}
	recs, _ := r.ledger.List(t.Context(), agentenv.Filter{Run: ep.Run})
	if len(recs) != 1 {
		t.Errorf("records of the run = %d, want 1 (gone, as history)", len(recs))
	}
}

func TestHelloFileIsTheExample(t *testing.T) {
	ex, err := os.ReadFile("../examples/hello/task.yaml")
	if err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile("hello.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ex, own) {
		t.Errorf("examples/hello/task.yaml differs from task/hello.yaml; copy it over")
	}
	if _, err := task.LoadPath("../examples/hello"); err != nil {
		t.Errorf("LoadPath(examples/hello) = %v", err)
	}
}

func BenchmarkHello(b *testing.B) {
	r := newRig(b, nil)
	r.runner.Progress = nil
	hello := task.Hello()
	for b.Loop() {
		sum, err := r.runner.Run(b.Context(), hello, task.RunOptions{})
		if err != nil || !sum.AllPassed() {
			b.Fatalf("Run(hello) = %+v, %v", sum, err)
		}
	}
}

package task_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/provider/process"
	"github.com/agentenv/agentenv/task"
	"github.com/agentenv/agentenv/task/toolgate"
)

// rig is a Runner over a bbolt ledger, the process provider and the fake provider, all in
// temporary folders.
type rig struct {
	runner  *task.Runner
	ledger  agentenv.Ledger
	proc    *process.Provider
	fake    *fake.Provider
	events  []task.Event
	workdir string
}

// newRig builds a rig; wrap, if not nil, wraps the ledger (for fault injection).
func newRig(tb testing.TB, wrap func(agentenv.Ledger) agentenv.Ledger) *rig {
	tb.Helper()
	dir := tb.TempDir()
	l, err := bolt.Open(tb.Context(), filepath.Join(dir, "ledger.bolt"), nil)
	if err != nil {
		tb.Fatalf("bolt.Open = %v", err)
	}
	tb.Cleanup(func() { l.Close() })
	var led agentenv.Ledger = l
	if wrap != nil {
		led = wrap(l)
	}
	proc, err := process.New(process.Config{Root: filepath.Join(dir, "sandboxes")}, nil)
	if err != nil {
		tb.Fatalf("process.New = %v", err)
	}
	fk := fake.New("fake")
	m, err := lifecycle.New(lifecycle.Config{
		Ledger:      led,
		Providers:   map[string]agentenv.Provider{"process": proc, "fake": fk},
		ReclaimWait: 2 * time.Second,
	})
	if err != nil {
		tb.Fatalf("lifecycle.New = %v", err)
	}
	r := &rig{ledger: led, proc: proc, fake: fk, workdir: filepath.Join(dir, "work")}
	r.runner = &task.Runner{Manager: m, Ledger: led, Workdir: r.workdir, DrainTimeout: 5 * time.Second, Tools: toolgate.Server{},
		Progress: func(ev task.Event) { r.events = append(r.events, ev) }}
	return r
}

// assertClean fails tb if any record is short of gone, any process work folder is left, or
// the fake provider still has a live sandbox.
func (r *rig) assertClean(tb testing.TB) {
	tb.Helper()
	recs, err := r.ledger.List(tb.Context(), agentenv.Filter{})
	if err != nil {
		tb.Fatalf("List = %v", err)
	}
	for _, rec := range recs {
		if rec.State != agentenv.StateGone {
			tb.Errorf("record %s (%s) is %s, want gone", rec.ID, rec.Provider, rec.State)
		}
	}
	entries, _ := os.ReadDir(r.proc.Root())
	for _, e := range entries {
		tb.Errorf("work folder %s left in %s", e.Name(), r.proc.Root())
	}
	if live := r.fake.Live(); len(live) > 0 {
		tb.Errorf("fake provider still has %v", live)
	}
}

// mustParse parses a task from YAML text or fails tb.
func mustParse(tb testing.TB, name, src string) *task.Task {
	tb.Helper()
	tk, err := task.Parse(name, []byte(src))
	if err != nil {
		tb.Fatalf("Parse(%s) = %v", name, err)
	}
	return tk
}

func writeFile(tb testing.TB, path, data string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		tb.Fatal(err)
	}
}

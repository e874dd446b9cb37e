package task_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/task"
)

// TestDeployVolume runs a deploy_volume step and two deploy_sandbox steps that mount it on the
// fake provider: what one writes into it the other reads; each sandbox is created with its
// mount; the volume is a record of the run; and the episode's teardown leaves nothing.
func TestDeployVolume(t *testing.T) {
	dir := t.TempDir()
	l, err := bolt.Open(t.Context(), filepath.Join(dir, "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	fk := &spy{Provider: fake.New("fake"), specs: map[string]agentenv.SandboxSpec{}}
	m, err := lifecycle.New(lifecycle.Config{Ledger: l, Providers: map[string]agentenv.Provider{"fake": fk}, ReclaimWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := &task.Runner{Manager: m, Ledger: l, Workdir: filepath.Join(dir, "work"), DrainTimeout: 5 * time.Second}
	tk := mustParse(t, "t.yaml", `name: vol
steps:
- {id: data, type: deploy_volume}
- {id: writer, type: deploy_sandbox, image: img, volumes: [{volume: data, path: /data}], depends_on: [data]}
- {id: main, type: deploy_sandbox, image: img, volumes: [{volume: data, path: /shared, read_only: true}], depends_on: [data]}
- {id: put, type: write_file, sandbox: writer, path: /data/note.txt, content: "from the writer", depends_on: [writer]}
- {id: ok, type: file_contains, sandbox: main, path: /shared/note.txt, contains: "from the writer", depends_on: [main, put]}
`)
	sum, err := r.Run(t.Context(), tk, task.RunOptions{Provider: "fake"})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomePassed {
		t.Fatalf("episode %s: %s", ep.Outcome, ep.Error)
	}
	vs := stepOf(ep, "data")
	volID := vs.Outputs["volume"]
	if volID == "" || vs.Outputs["provider"] != "fake" {
		t.Fatalf("data outputs = %v", vs.Outputs)
	}
	rec, err := l.Get(t.Context(), volID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != agentenv.KindVolume || rec.Run != ep.Run || rec.State != agentenv.StateGone || rec.Role != agentenv.TaskRole("data") {
		t.Errorf("volume record = kind %s run %s state %s role %s, want volume of run %s, gone, role task:data", rec.Kind, rec.Run, rec.State, rec.Role, ep.Run)
	}
	for id, want := range map[string]agentenv.Mount{
		"writer": {Volume: volID, Path: "/data"},
		"main":   {Volume: volID, Path: "/shared", ReadOnly: true},
	} {
		got := fk.specs[stepOf(ep, id).Outputs["record"]].Mounts
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s: mounts %+v, want %+v", id, got, want)
		}
	}
	if live, vols := fk.Live(), fk.Volumes(); len(live) > 0 || len(vols) > 0 {
		t.Errorf("fake still has %v, volumes %v", live, vols)
	}
}

// TestDeployVolumeRefused: on a provider without volumes the deploy_volume step fails as the
// infrastructure's, naming the provider, and makes nothing; a task whose volumes are bad is
// refused at load, naming the field.
func TestDeployVolumeRefused(t *testing.T) {
	dir := t.TempDir()
	l, err := bolt.Open(t.Context(), filepath.Join(dir, "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	fk := fake.New("plain", agentenv.AbilityVolumes)
	m, err := lifecycle.New(lifecycle.Config{Ledger: l, Providers: map[string]agentenv.Provider{"plain": fk}})
	if err != nil {
		t.Fatal(err)
	}
	r := &task.Runner{Manager: m, Ledger: l, Workdir: filepath.Join(dir, "work"), DrainTimeout: 5 * time.Second}
	tk := mustParse(t, "t.yaml", `name: vol
steps:
- {id: data, type: deploy_volume}
- {id: main, type: deploy_sandbox, image: img, volumes: [{volume: data, path: /data}], depends_on: [data]}
`)
	sum, err := r.Run(t.Context(), tk, task.RunOptions{Provider: "plain"})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	st := stepOf(ep, "data")
	if ep.Outcome == task.OutcomePassed || !strings.Contains(st.Error, "provider plain has no volumes") {
		t.Errorf("episode %s, data step: %s; want it failed naming the provider", ep.Outcome, st.Error)
	}
	if live := fk.Live(); len(live) > 0 {
		t.Errorf("fake still has %v", live)
	}

	for _, c := range []struct{ src, want string }{
		{"- {id: main, type: deploy_sandbox, image: img, volumes: [{volume: data, path: data}]}", "volumes[0].path: want an absolute path"},
		{"- {id: data, type: deploy_volume}\n- {id: main, type: deploy_sandbox, image: img, volumes: [{volume: data, path: /d}, {volume: data, path: /d/}]}", `volumes[1].path: "/d/" is mounted twice`},
		{"- {id: data, type: deploy_network}\n- {id: main, type: deploy_sandbox, image: img, volumes: [{volume: data, path: /d}]}", `step "data" is a deploy_network; want deploy_volume`},
		{"- {id: main, type: deploy_sandbox, image: img, volumes: [{path: /d}]}", "volume"},
	} {
		_, err := task.Parse("t.yaml", []byte("name: bad\nsteps:\n"+c.src+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", c.src, err, c.want)
		}
	}
}

package task_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/task"
)

// spy is the fake provider, keeping the spec of every sandbox it was asked to create.
type spy struct {
	*fake.Provider
	mu    sync.Mutex
	specs map[string]agentenv.SandboxSpec // by record id
}

func (p *spy) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	p.mu.Lock()
	p.specs[spec.Name] = spec
	p.mu.Unlock()
	return p.Provider.Create(ctx, spec)
}

// Capabilities are the fake's, with Join: the spy stands for a provider like docker's.
func (p *spy) Capabilities() agentenv.Capabilities {
	c := p.Provider.Capabilities()
	c.Join = true
	return c
}

// TestDeployNetwork runs a deploy_network step and two deploy_sandbox steps on its network on
// the fake provider, and a third on a second network that joins the first: each sandbox is
// created on its network with its aliases and workdir (and the joined network's record with
// its aliases there), the network is a record of the run, and the episode's teardown leaves
// nothing.
func TestDeployNetwork(t *testing.T) {
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
	r := &task.Runner{Manager: m, Ledger: l, Workdir: filepath.Join(dir, "work"), DrainTimeout: 5 * time.Second,
		ImageMap: map[string]string{"postgres:16": "local-postgres:1"}}
	tk := mustParse(t, "t.yaml", `name: net
steps:
- {id: net, type: deploy_network}
- {id: db, type: deploy_sandbox, image: postgres:16, network: net, aliases: [db, database], depends_on: [net]}
- {id: main, type: deploy_sandbox, image: img, network: net, aliases: [main], workdir: /app, depends_on: [db],
   healthcheck: {command: "true", interval_sec: 0.1}}
- {id: ok, type: command_succeeds, sandbox: main, command: ["true"]}
- {id: out, type: deploy_network}
- {id: px, type: deploy_sandbox, image: img, network: out, join: [{network: net, aliases: [egress-proxy]}], depends_on: [net, out]}
`)
	sum, err := r.Run(t.Context(), tk, task.RunOptions{Provider: "fake"})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomePassed {
		t.Fatalf("episode %s: %s", ep.Outcome, ep.Error)
	}
	netStep := stepOf(ep, "net")
	netID := netStep.Outputs["network"]
	if netID == "" || netStep.Outputs["provider"] != "fake" {
		t.Fatalf("net outputs = %v", netStep.Outputs)
	}
	rec, err := l.Get(t.Context(), netID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != agentenv.KindNetwork || rec.Run != ep.Run || rec.State != agentenv.StateGone {
		t.Errorf("network record = kind %s run %s state %s, want network of run %s, gone", rec.Kind, rec.Run, rec.State, ep.Run)
	}
	for id, want := range map[string]agentenv.SandboxSpec{
		"db":   {Image: "local-postgres:1", Network: netID, Aliases: []string{"db", "database"}},
		"main": {Image: "img", Network: netID, Aliases: []string{"main"}, WorkDir: "/app"},
	} {
		got := fk.specs[stepOf(ep, id).Outputs["record"]]
		if got.Image != want.Image || got.Network != want.Network || !slices.Equal(got.Aliases, want.Aliases) || got.WorkDir != want.WorkDir {
			t.Errorf("%s: spec image %q network %q aliases %v workdir %q, want %q %q %v %q", id,
				got.Image, got.Network, got.Aliases, got.WorkDir, want.Image, want.Network, want.Aliases, want.WorkDir)
		}
	}
	px := fk.specs[stepOf(ep, "px").Outputs["record"]]
	if outID := stepOf(ep, "out").Outputs["network"]; px.Network != outID || len(px.Join) != 1 || px.Join[0].Network != netID ||
		!slices.Equal(px.Join[0].Aliases, []string{"egress-proxy"}) {
		t.Errorf("px: spec network %q join %+v, want %q and %s as egress-proxy", px.Network, px.Join, outID, netID)
	}
	if fk.Calls("create_network") != 2 || fk.Calls("exec") < 2 {
		t.Errorf("create_network %d, exec %d: want two networks and the healthcheck's exec", fk.Calls("create_network"), fk.Calls("exec"))
	}
	recs, err := l.List(t.Context(), agentenv.Filter{Run: ep.Run})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.State != agentenv.StateGone {
			t.Errorf("record %s (%s) is %s after the episode", rec.ID, rec.Kind, rec.State)
		}
	}
	if live := fk.Live(); len(live) > 0 {
		t.Errorf("fake still has %v", live)
	}
}

// TestHealthcheck runs deploy_sandbox's healthcheck in real shells on the process provider:
// one that passes on its second try ends the step; one that never passes fails it, as the
// infrastructure's, with the last try's output; and either way nothing is left.
func TestHealthcheck(t *testing.T) {
	r := newRig(t, nil)
	tk := mustParse(t, "t.yaml", `name: health
steps:
- {id: sb, type: deploy_sandbox, provider: process,
   healthcheck: {command: "test -f flag || { touch flag; echo first; exit 1; }", interval_sec: 0.05, retries: 2}}
- {id: ok, type: command_succeeds, sandbox: sb, command: [test, -f, flag]}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if ep := sum.Episodes[0]; ep.Outcome != task.OutcomePassed {
		t.Fatalf("passing healthcheck: episode %s: %s", ep.Outcome, ep.Error)
	}

	tk = mustParse(t, "t.yaml", `name: unhealthy
steps:
- {id: sb, type: deploy_sandbox, provider: process,
   healthcheck: {command: "echo try >> tries; echo not ready yet; exit 3", interval_sec: 0.05, retries: 3, start_period_sec: 0.2}}
- {id: ok, type: command_succeeds, sandbox: sb, command: ["true"]}
`)
	start := time.Now()
	sum, err = r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	sb := stepOf(ep, "sb")
	if ep.Outcome == task.OutcomePassed || sb.ErrorKind != agentenv.StepErrorInfra {
		t.Fatalf("unhealthy: episode %s, step %s kind %q: %s", ep.Outcome, sb.Status, sb.ErrorKind, sb.Error)
	}
	for _, want := range []string{"failed 3 times", "exit 3", "not ready yet"} {
		if !strings.Contains(sb.Error, want) {
			t.Errorf("step error %q does not say %q", sb.Error, want)
		}
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 20*time.Second {
		t.Errorf("the unhealthy run took %s: want the start period, then three failures", took)
	}

	tk = mustParse(t, "t.yaml", `name: hanging
steps:
- {id: sb, type: deploy_sandbox, provider: process, healthcheck: {command: "sleep 30", timeout_sec: 0.2, retries: 2, interval_sec: 0.01}}
`)
	start = time.Now()
	sum, err = r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if e := stepOf(sum.Episodes[0], "sb").Error; !strings.Contains(e, "failed 2 times") || !strings.Contains(e, "timed out after 200ms") {
		t.Errorf("hanging healthcheck: step error %q", e)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the hanging healthcheck took %s: its tries were not bounded by timeout_sec", took)
	}
	r.assertClean(t)
}

// TestDeployNetworkRefused: a provider without networks is named; a sandbox may join only a
// deploy_network step's network, and aliases need one.
func TestDeployNetworkRefused(t *testing.T) {
	r := newRig(t, nil)
	tk := mustParse(t, "t.yaml", "name: n\nsteps:\n- {id: net, type: deploy_network, provider: process}\n")
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if e := stepOf(sum.Episodes[0], "net").Error; !strings.Contains(e, "provider process has no private networks") {
		t.Errorf("deploy_network on process: error %q", e)
	}
	tk = mustParse(t, "t.yaml", `name: n
steps:
- {id: net, type: deploy_network, provider: fake}
- {id: sb, type: deploy_sandbox, provider: process, network: net, depends_on: [net]}
`)
	sum, err = r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if e := stepOf(sum.Episodes[0], "sb").Error; !strings.Contains(e, "network is on provider fake, this sandbox on process") {
		t.Errorf("sandbox on another provider than its network: error %q", e)
	}
	tk = mustParse(t, "t.yaml", `name: n
steps:
- {id: a, type: deploy_network, provider: fake}
- {id: b, type: deploy_network, provider: fake}
- {id: sb, type: deploy_sandbox, provider: fake, image: x, network: a, join: [{network: b}], depends_on: [a, b]}
`)
	sum, err = r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if e := stepOf(sum.Episodes[0], "sb").Error; !strings.Contains(e, "provider fake cannot join a sandbox to more than one network") {
		t.Errorf("join on a provider without Join: error %q", e)
	}
	r.assertClean(t)

	for src, want := range map[string]string{
		"- {id: n, type: deploy_network}\n- {id: b, type: deploy_sandbox, image: x, join: [{network: n}], depends_on: [n]}\n":                                                                     "join: only with network",
		"- {id: n, type: deploy_network}\n- {id: b, type: deploy_sandbox, image: x, network: n, join: [{network: n}], depends_on: [n]}\n":                                                         "join[0].network: step n is joined twice",
		"- {id: n, type: deploy_network}\n- {id: m, type: deploy_sandbox, image: x}\n- {id: b, type: deploy_sandbox, image: x, network: n, join: [{network: m}], depends_on: [n, m]}\n":           `step "m" is a deploy_sandbox; want deploy_network`,
		"- {id: n, type: deploy_network}\n- {id: o, type: deploy_network}\n- {id: b, type: deploy_sandbox, image: x, network: n, join: [{network: o, aliases: [\"a b\"]}], depends_on: [n, o]}\n": "join[0].aliases[0]",
		"- {id: a, type: deploy_sandbox, image: x}\n- {id: b, type: deploy_sandbox, image: x, network: a, depends_on: [a]}\n":                                                                     `step "a" is a deploy_sandbox; want deploy_network`,
		"- {id: b, type: deploy_sandbox, image: x, aliases: [db]}\n":                                                                                                                              "aliases: only with network",
		"- {id: n, type: deploy_network}\n- {id: b, type: deploy_sandbox, image: x, network: n, aliases: [\"a b\"], depends_on: [n]}\n":                                                           "is not a host name",
		"- {id: b, type: deploy_sandbox, image: x, healthcheck: {command: \"\"}}\n":                                                                                                               "healthcheck.command",
		"- {id: b, type: deploy_sandbox, image: x, healthcheck: {command: \"true\", retries: -1}}\n":                                                                                              "healthcheck.retries",
	} {
		_, err := task.Parse("t.yaml", []byte("name: n\nsteps:\n"+src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", src, err, want)
		}
	}
}

// TestWaitExit: a deploy_sandbox step with wait_exit ends once its command has exited 0 (its
// dependents see what it did), and fails, as the infrastructure's, naming the exit code when it
// exits otherwise; real shells on the process provider.
func TestWaitExit(t *testing.T) {
	r := newRig(t, nil)
	dir := t.TempDir()
	tk := mustParse(t, "t.yaml", `name: init
steps:
- {id: init, type: deploy_sandbox, provider: process, wait_exit: true,
   command: [sh, -c, "sleep 0.3; echo ready > `+dir+`/init-done"]}
- {id: app, type: deploy_sandbox, provider: process, depends_on: [init]}
- {id: ok, type: command_succeeds, sandbox: app, command: [test, -f, `+dir+`/init-done]}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomePassed {
		t.Fatalf("init exiting 0: episode %s: %s", ep.Outcome, ep.Error)
	}
	if code := stepOf(ep, "init").Outputs["exit_code"]; code != "0" {
		t.Errorf("init's exit_code output %q, want 0", code)
	}

	tk = mustParse(t, "t.yaml", `name: init-fails
steps:
- {id: init, type: deploy_sandbox, provider: process, wait_exit: true, command: [sh, -c, "exit 4"]}
- {id: app, type: deploy_sandbox, provider: process, depends_on: [init]}
`)
	sum, err = r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep = sum.Episodes[0]
	init := stepOf(ep, "init")
	if ep.Outcome == task.OutcomePassed || init.ErrorKind != agentenv.StepErrorInfra || stepOf(ep, "app").Status == agentenv.StepPassed {
		t.Fatalf("init exiting 4: episode %s, init %s kind %q (%s), app %s", ep.Outcome, init.Status, init.ErrorKind, init.Error, stepOf(ep, "app").Status)
	}
	// (The process provider keeps no output, so the error has no last lines here.)
	if !strings.Contains(init.Error, "exited 4, want 0") {
		t.Errorf("init's error %q does not say it exited 4", init.Error)
	}
	if _, err := task.Parse("t.yaml", []byte("name: t\nsteps:\n- {id: sb, type: deploy_sandbox, provider: process, wait_exit: true, healthcheck: {command: 'true'}}\n")); err == nil || !strings.Contains(err.Error(), "wait_exit: not with healthcheck") {
		t.Errorf("wait_exit with a healthcheck: %v", err)
	}
	r.assertClean(t)
}

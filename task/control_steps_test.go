package task_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/envsdk"
	"github.com/agentenv/agentenv/examples/kv"
	"github.com/agentenv/agentenv/gateway"
	"github.com/agentenv/agentenv/task"
)

// kvDeployer "deploys" the kv env in process: the real kv server with its config extension
// and the real gateway in front of it, both over loopback HTTP; every Deploy gets fresh ones.
type kvDeployer struct {
	tb testing.TB

	mu       sync.Mutex
	n        int
	closers  map[string]func()
	tornDown []string
}

func (d *kvDeployer) Deploy(ctx context.Context, _ string, _ task.DeployOptions) (task.DeployedEnv, error) {
	s, exts := kv.NewWithExtensions(nil)
	h, err := envsdk.WithExtensions(s, exts...)
	if err != nil {
		return task.DeployedEnv{}, err
	}
	backend := httptest.NewServer(h)
	const admin, role = "admin-token-s3cret", "default-token-s3cret"
	g, err := gateway.New(ctx, gateway.Config{Name: "kv", Token: admin, RoleTokens: map[string]string{"default": role},
		Servers: []gateway.Backend{{Name: "kv", URL: backend.URL + "/mcp"}}, ConnectTimeout: 10 * time.Second})
	if err != nil {
		backend.Close()
		return task.DeployedEnv{}, err
	}
	gw := httptest.NewServer(g.Handler())
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	id := fmt.Sprintf("kv-%d", d.n)
	d.closers[id] = func() { gw.Close(); _ = g.Close(); backend.Close() }
	return task.DeployedEnv{ID: id, GatewayURL: gw.URL + "/mcp", Token: admin, Tokens: map[string]string{"default": role}}, nil
}

func (d *kvDeployer) Teardown(ctx context.Context, id string) (agentenv.Receipt, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.closers[id]; c != nil {
		c()
		delete(d.closers, id)
	}
	d.tornDown = append(d.tornDown, id)
	return agentenv.Receipt{Items: []agentenv.ReceiptItem{{Record: id, Provider: "fake", Outcome: agentenv.OutcomeTerminated}}}, nil
}

// examples/triggers-task against the real gateway and kv server in process scores 1, and
// fails the rows it should when the trigger's barrier and message are taken out.
func TestTriggersTaskInProcess(t *testing.T) {
	tk, err := task.Load("../examples/triggers-task/task.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, nil)
	dep := &kvDeployer{tb: t, closers: map[string]func(){}}
	r.runner.Deployer = dep
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	for _, s := range ep.Steps {
		if s.Status != agentenv.StepPassed {
			t.Errorf("step %s: %s %q rows %s", s.ID, s.Status, s.Error, s.Outputs["rows"])
		}
	}
	if ep.Score == nil || *ep.Score != 1 {
		t.Fatalf("episode score %v (%s), want 1", ep.Score, ep.Outcome)
	}
	if len(dep.closers) != 0 {
		t.Errorf("deployments left: %v", dep.closers)
	}

	// Without the message the trajectory verifier finds no email on the provoking call.
	src := strings.Replace(mustRead(t, "../examples/triggers-task/task.yaml"),
		`          - {type: message, text: "New email from Dana: the review moved to 14:00."}`+"\n", "", 1)
	tk2 := mustParse(t, "../examples/triggers-task/task2.yaml", src)
	sum, err = r.runner.Run(t.Context(), tk2, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep = sum.Episodes[0]
	var traj agentenv.StepRecord
	for _, s := range ep.Steps {
		if s.ID == "trajectory" {
			traj = s
		}
	}
	if traj.Score == nil || *traj.Score == 1 || !strings.Contains(traj.Outputs["rows"], `New email from Dana`) {
		t.Errorf("trajectory verifier without the message: score %v rows %s", traj.Score, traj.Outputs["rows"])
	}
}

func TestControlStepErrors(t *testing.T) {
	const env = "steps:\n- {id: e, type: deploy_env, file: x}\n"
	for _, tc := range []struct{ step, want string }{
		{"{id: c, type: set_clock, env: e}", "virtual_time: want an RFC 3339 time"},
		{"{id: c, type: set_clock, env: e, clear: true, virtual_time: '2026-01-01T00:00:00Z'}", "not both"},
		{"{id: c, type: set_clock, env: e, virtual_time: '2026-01-01T00:00:00Z', virtual_seconds_per_real_second: -1}", "want 0 to 86400"},
		{"{id: c, type: set_tool_access, env: e, role: agent}", "set enable or disable"},
		{"{id: c, type: register_triggers, env: e, triggers: [{when: {type: turn, count: 1}}]}", "triggers[0].id"},
		{"{id: c, type: call_extension, env: e, server: kv, path: x, method: TRACE}", "want GET, POST"},
		{"{id: c, type: call_extension, env: e, server: kv, path: '../card'}", "plain path"},
		{"{id: c, type: apply_server_config, env: e, directives: [{service: kv}]}", "directives[0].uri: missing field"},
		{"{id: c, type: gateway_trajectory, env: e, expect: [{}]}", "expect[0]: set via"},
		{"{id: c, type: gateway_trajectory, env: e, expect: [{tool: x, conut: 1}]}", `unknown field (did you mean "count"?)`},
	} {
		_, err := task.Parse("t.yaml", []byte(env+"- "+tc.step+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.step, err, tc.want)
		}
	}
}

func mustRead(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

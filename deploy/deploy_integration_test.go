//go:build integration

package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/mcpclient"
	"github.com/agentenv/agentenv/provider/docker"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/spec"
)

// postgresImage is built by images/debian/build.sh postgres (.ci/run does it).
const postgresImage = "agentenv-postgres:local"

// rig is a real docker provider, a bbolt ledger and a deployer over them.
type rig struct {
	t       *testing.T
	dc      *client.Client
	docker  *docker.Provider
	mgr     *lifecycle.Manager
	d       *deploy.Deployer
	runtime string
	test    string
}

func newRig(t *testing.T, wrap func(*docker.Provider) agentenv.Provider) *rig {
	t.Helper()
	dc := dockertest.Require(t)
	runtime, _ := dockertest.RuntimeImage(t)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	dp, err := docker.New(docker.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p agentenv.Provider = dp
	if wrap != nil {
		p = wrap(dp)
	}
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"docker": p}, ReclaimWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, dc: dc, docker: dp, mgr: mgr, d: deploy.New(mgr, nil), runtime: runtime, test: dockertest.TestImage(t)}
}

// name draws a deployment id and checks, when the test ends, that nothing labelled with it is
// left on the engine.
func (r *rig) name() string {
	id := fmt.Sprintf("dep-t%x", rand.Uint32())
	dockertest.CheckNoLeftovers(r.t, r.dc, map[string]string{agentenv.LabelDeployment: id})
	return id
}

func (r *rig) leftovers(id string) []string {
	r.t.Helper()
	left, err := dockertest.Leftovers(context.Background(), r.dc, map[string]string{agentenv.LabelDeployment: id})
	if err != nil {
		r.t.Fatal(err)
	}
	return left
}

// kvEnv is one MCP server, no database; gatewayImage replaces the gateway's image when set.
func (r *rig) kvEnv(gatewayImage string) *spec.Env {
	if gatewayImage == "" {
		gatewayImage = r.runtime
	}
	return r.parse("kv", fmt.Sprintf(`name: kv
servers:
  - name: kv
    image: %s
    command: [/agentenv, serve, kv, --listen, ":8080"]
    port: 8080
gateway:
  image: %s
`, r.runtime, gatewayImage))
}

// notesEnv is the notes server on the service DB with both sidecars; with kv, a multi env.
func (r *rig) notesEnv(withKV bool) *spec.Env {
	kv := ""
	if withKV {
		kv = fmt.Sprintf(`
  - name: kv
    image: %s
    command: [/agentenv, serve, kv, --listen, ":8080"]
    port: 8080`, r.runtime)
	}
	return r.parse("notes", fmt.Sprintf(`name: notes
servers:
  - name: notes
    image: %[1]s
    command: [/agentenv, serve, notes, --listen, ":8080"]
    port: 8080
    database: true%[3]s
service_db:
  image: %[2]s
  web_ui:
    enabled: true
  db_mcp:
    enabled: true
    image: %[1]s
gateway:
  image: %[1]s
  roles:
    reader: ["*delete*"]
`, r.runtime, postgresImage, kv))
}

func (r *rig) parse(name, y string) *spec.Env {
	r.t.Helper()
	env, err := spec.Parse(name+".yaml", []byte(y))
	if err != nil {
		r.t.Fatal(err)
	}
	return env
}

func teardown(t *testing.T, r *rig, id string) agentenv.Receipt {
	t.Helper()
	rc, err := r.d.Teardown(context.Background(), id)
	if err != nil {
		t.Fatalf("teardown %s: %v (%+v)", id, err, rc)
	}
	return rc
}

// assertReceiptClean fails on any failed, still-listed or left item.
func assertReceiptClean(t *testing.T, rc agentenv.Receipt, wantAlreadyGone bool) {
	t.Helper()
	for _, it := range rc.Items {
		switch {
		case it.Outcome == agentenv.OutcomeAlreadyGone && !wantAlreadyGone:
			t.Errorf("%s (%s): already gone, want terminated", it.Record, it.Role)
		case !it.Outcome.Down():
			t.Errorf("%s (%s): %s %s", it.Record, it.Role, it.Outcome, it.Reason)
		}
	}
}

func TestNotesThroughTheGatewayLandInTheServiceDB(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id := r.name()
	res, err := r.d.Deploy(t.Context(), r.notesEnv(false), deploy.Options{Provider: "docker", Name: id})
	if err != nil {
		t.Fatal(err)
	}
	cs := envtest.Connect(t, res.GatewayURL, res.Token)
	envtest.Call(t, cs, "add_note", map[string]any{"title": "groceries", "body": "milk and eggs", "tags": []string{"home"}})
	envtest.Call(t, cs, "add_note", map[string]any{"title": "talk", "body": "agentenv never forgets"})
	if got := envtest.Call(t, cs, "search_notes", map[string]any{"query": "forgets"}); !strings.Contains(got, "talk") {
		t.Errorf("search_notes = %s, want the talk note", got)
	}
	// The rows are in the service DB: directly ...
	conn, err := pgx.Connect(t.Context(), res.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM notes.notes").Scan(&n); err != nil || n != 2 {
		t.Errorf("notes in the service DB = %d (%v), want 2", n, err)
	}
	conn.Close(context.Background())
	// A role token fixes its role: a reader spoofing the default role still cannot delete,
	// and cannot lift its own rule.
	if len(res.Tokens) != 2 || res.Tokens["reader"] == "" || res.Tokens["default"] == "" || res.Tokens["reader"] == res.Token {
		t.Fatalf("role tokens %v, want distinct reader and default tokens", slices.Collect(maps.Keys(res.Tokens)))
	}
	spoof := mcpclient.HTTPClient(nil, res.Tokens["reader"])
	spoof.Transport = roleHeader{spoof.Transport, "default"}
	if _, err := mcp.NewClient(&mcp.Implementation{Name: "spoof", Version: "v1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: res.GatewayURL, HTTPClient: spoof}, nil); err == nil {
		t.Errorf("reader token with AgentEnv-Role: default connected, want 403")
	}
	rs := envtest.Connect(t, res.GatewayURL, res.Tokens["reader"])
	if res, err := rs.CallTool(t.Context(), &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"id": 1}}); err == nil && !res.IsError {
		t.Errorf("reader deleted a note")
	}
	gate := strings.TrimSuffix(res.GatewayURL, "/mcp") + "/tools/enable"
	for tok, want := range map[string]int{res.Tokens["reader"]: http.StatusForbidden, "": http.StatusUnauthorized} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", gate, strings.NewReader(`{"role":"reader","tools":["*delete*"]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := mcpclient.HTTPClient(nil, tok).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("/tools/enable with token %q: %s, want %d", tok, resp.Status, want)
		}
	}
	if got := envtest.Call(t, rs, "search_notes", map[string]any{"query": "milk"}); !strings.Contains(got, "groceries") {
		t.Errorf("reader search_notes = %s, want the groceries note", got)
	}
	rs.Close()
	// ... and through db-mcp.
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v1"}, nil)
	// db-mcp has no door of its own: it is a backend of the gateway, behind a role's token.
	if u, ok := res.Doc.URLs["db-mcp"]; ok {
		t.Errorf("db-mcp is published at %s, want it behind the gateway only", u)
	}
	dbs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: res.GatewayURL,
		HTTPClient: mcpclient.HTTPClient(nil, res.Tokens["default"])}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := envtest.Call(t, dbs, "query", map[string]any{"sql": "SELECT title FROM notes.notes ORDER BY id"}); !strings.Contains(got, "groceries") {
		t.Errorf("db-mcp query = %s, want the groceries row", got)
	}
	dbs.Close()

	rc := teardown(t, r, id)
	assertReceiptClean(t, rc, false)
	if n := rc.Count(agentenv.OutcomeTerminated); n != len(res.Records) {
		t.Errorf("teardown terminated %d, want each of the %d records once", n, len(res.Records))
	}
	if left := r.leftovers(id); len(left) != 0 {
		t.Errorf("left after teardown: %v", left)
	}
}

func TestVMModeDeployAndTeardown(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id := r.name()
	res, err := r.d.Deploy(t.Context(), r.kvEnv(""), deploy.Options{Provider: "docker", Mode: deploy.ModeVM, Name: id})
	if err != nil {
		t.Fatal(err)
	}
	if res.Doc.Mode != deploy.ModeVM || len(res.Records) != 1 {
		t.Errorf("mode %s with records %v, want vm with one VM record", res.Doc.Mode, res.Records)
	}
	envtest.Call(t, envtest.Connect(t, res.GatewayURL, res.Token), "set", map[string]any{"key": "a", "value": "1"})
	assertReceiptClean(t, teardown(t, r, id), false)
	if left := r.leftovers(id); len(left) != 0 {
		t.Errorf("left after teardown: %v", left)
	}
}

// TestCancelAtEveryStep cancels the deploy at each of its step boundaries in turn, in both
// modes, and checks that nothing labelled with the deployment remains. A deploy cancelled at
// its last boundary may have finished its work: Deploy undoes it all the same.
func TestCancelAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{deploy.ModeContainer, deploy.ModeVM} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t, nil)
			var events []deploy.Event
			id := r.name()
			res, err := r.d.Deploy(t.Context(), r.kvEnv(""), deploy.Options{Provider: "docker", Mode: mode, Name: id,
				Progress: func(e deploy.Event) { events = append(events, e) }})
			if err != nil {
				t.Fatal(err)
			}
			teardown(t, r, res.Doc.ID)
			r.cancelAtEachEvent(func() *spec.Env { return r.kvEnv("") }, deploy.Options{Provider: "docker", Mode: mode}, events)
			t.Logf("%s mode: cancelled at each of %d boundaries", mode, len(events))
		})
	}
}

// cancelAtEachEvent deploys env() with opts once for each of events (those of an uncancelled
// deploy), one after another, cancelling the k-th at its k-th progress event: each returns
// context.Canceled and leaves nothing labelled with its deployment.
func (r *rig) cancelAtEachEvent(env func() *spec.Env, opts deploy.Options, events []deploy.Event) {
	t := r.t
	t.Helper()
	for k := range events {
		step := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		seen := 0
		o := opts
		o.Name = r.name()
		o.Progress = func(deploy.Event) {
			if seen == k {
				cancel()
			}
			seen++
		}
		_, err := r.d.Deploy(ctx, env(), o)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancel at %s %s: Deploy = %v, want context.Canceled", events[k].Component, events[k].Phase, err)
		}
		if left := r.leftovers(o.Name); len(left) != 0 {
			t.Errorf("cancel at %s %s left %v", events[k].Component, events[k].Phase, left)
		}
		t.Logf("cancel at event %d (%s %s): %s", k, events[k].Component, events[k].Phase, time.Since(step).Round(time.Millisecond))
	}
}

// onRole cancels the deploy when the provider is asked to create the sandbox of a role: the
// cancellation lands while that create is in flight.
type onRole struct {
	*docker.Provider
	role   string
	cancel context.CancelFunc
}

func (o onRole) Create(ctx context.Context, s agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if s.Labels[agentenv.LabelRole] == o.role {
		o.cancel()
	}
	return o.Provider.Create(ctx, s)
}

// TestSeed001CancelWhileDBMCPIsCreated: a container-mode deploy cancelled while db-mcp is being
// created terminates the service DB, the MCP server and the DB web UI it made.
func TestSeed001CancelWhileDBMCPIsCreated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := newRig(t, func(p *docker.Provider) agentenv.Provider {
		return onRole{Provider: p, role: string(agentenv.RoleDBMCP), cancel: cancel}
	})
	id := r.name()
	_, err := r.d.Deploy(ctx, r.notesEnv(false), deploy.Options{Provider: "docker", Name: id})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Deploy = %v, want context.Canceled", err)
	}
	if left := r.leftovers(id); len(left) != 0 {
		t.Errorf("cancelled while db-mcp was created, left %v", left)
	}
	recs, _ := r.mgr.Ledger().List(t.Context(), agentenv.Filter{Deployment: id})
	roles := map[agentenv.Role]bool{}
	for _, rec := range recs {
		roles[rec.Role] = true
		if rec.State != agentenv.StateGone {
			t.Errorf("record %s (%s) is %s, want gone", rec.ID, rec.Role, rec.State)
		}
	}
	for _, want := range []agentenv.Role{agentenv.RoleServiceDB, agentenv.RoleDBMCP} {
		if !roles[want] {
			t.Errorf("no record of the %s, want one made and terminated (have %v)", want, roles)
		}
	}
}

func TestGatewayNeverReadyLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{deploy.ModeContainer, deploy.ModeVM} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t, nil)
			id := r.name()
			start := time.Now()
			// The test image runs no gateway: the container exits at once.
			_, err := r.d.Deploy(t.Context(), r.kvEnv(r.test), deploy.Options{Provider: "docker", Mode: mode, Name: id, Budget: 15 * time.Second})
			if err == nil || !strings.Contains(err.Error(), "gateway") {
				t.Fatalf("Deploy = %v, want a gateway error", err)
			}
			if mode == deploy.ModeContainer && !strings.Contains(err.Error(), "exited") {
				t.Errorf("Deploy error %q does not say the gateway exited", err)
			}
			t.Logf("%s mode: failed after %s: %v", mode, time.Since(start).Round(time.Millisecond), err)
			if left := r.leftovers(id); len(left) != 0 {
				t.Errorf("left %v", left)
			}
			doc, _ := r.mgr.Ledger().Deployments().Get(t.Context(), id)
			if doc.State != agentenv.DeploymentFailed {
				t.Errorf("deployment state %s, want failed", doc.State)
			}
		})
	}
}

func TestChainWhoseFirstMemberFailsKeepsOnlyTheWinner(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(p *docker.Provider) agentenv.Provider {
		// The first attempt's second component fails to create.
		return fault.WrapProvider(p, fault.NewPlan(fault.Rule{Op: "create", Call: 2, Action: fault.Error}))
	})
	id := r.name()
	res, err := r.d.Deploy(t.Context(), r.kvEnv(""), deploy.Options{Provider: "docker,docker", Name: id})
	if err != nil {
		t.Fatal(err)
	}
	if res.Doc.ID != id || res.Doc.Winner != "docker" {
		t.Errorf("deployment %s won by %q, want %s won by docker", res.Doc.ID, res.Doc.Winner, id)
	}
	recs, _ := r.mgr.Ledger().List(t.Context(), agentenv.Filter{Deployment: id})
	live, gone := 0, 0
	for _, rec := range recs {
		switch rec.State {
		case agentenv.StateLive:
			live++
		case agentenv.StateGone:
			gone++
		default:
			t.Errorf("record %s is %s", rec.ID, rec.State)
		}
	}
	if live != 3 || gone < 1 {
		t.Errorf("records: %d live, %d gone; want the winner's 3 live and the failed member's gone", live, gone)
	}
	if left := r.leftovers(id); len(left) != 3 {
		t.Errorf("engine has %v, want only the winner's network and two containers", left)
	}
	assertReceiptClean(t, teardown(t, r, id), false)
}

func TestFailedDeployLeavesCallersVMAndEarlierDeploymentAlone(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	// An earlier deployment of the same env.
	first := r.name()
	res, err := r.d.Deploy(t.Context(), r.kvEnv(""), deploy.Options{Provider: "docker", Name: first})
	if err != nil {
		t.Fatal(err)
	}
	// The caller's VM.
	vmRun := fmt.Sprintf("run-t%x", rand.Uint32())
	dockertest.CheckNoLeftovers(t, r.dc, map[string]string{agentenv.LabelRun: vmRun})
	vm, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "docker", Kind: agentenv.KindVM, Run: vmRun})
	if err != nil {
		t.Fatal(err)
	}
	// A second deploy that fails, into the caller's VM.
	second := r.name()
	if _, err := r.d.Deploy(t.Context(), r.kvEnv(r.test), deploy.Options{Provider: "docker", Mode: deploy.ModeVM, Into: vm.ID, Name: second, Budget: 10 * time.Second}); err == nil {
		t.Fatal("Deploy with a broken gateway succeeded")
	}
	if _, err := r.docker.Get(t.Context(), vm.SandboxID); err != nil {
		t.Errorf("the caller's VM: %v, want it left alone", err)
	}
	left, _ := dockertest.Leftovers(t.Context(), r.dc, map[string]string{agentenv.LabelRecord: vm.ID})
	if len(left) != 1 || !strings.HasPrefix(left[0], "network") {
		t.Errorf("in the caller's VM: %v, want only its network (the failed deploy's containers removed)", left)
	}
	// The earlier deployment still serves.
	envtest.Call(t, envtest.Connect(t, res.GatewayURL, res.Token), "set", map[string]any{"key": "still", "value": "here"})
	if _, _, err := r.d.Reattach(t.Context(), first); err != nil {
		t.Errorf("reattach the earlier deployment: %v", err)
	}
	assertReceiptClean(t, teardown(t, r, first), false)
	if _, err := r.mgr.TeardownIDs(t.Context(), vm.ID); err != nil {
		t.Error(err)
	}
}

// TestTwoDeploysShareAVM: two deployments of one env into a caller's VM both serve, each
// under names of its own on a network of its own (each gateway reaches its own kv); the
// first's teardown removes exactly its containers, by their records, and leaves the second
// serving and the VM.
func TestTwoDeploysShareAVM(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	vmRun := fmt.Sprintf("run-t%x", rand.Uint32())
	dockertest.CheckNoLeftovers(t, r.dc, map[string]string{agentenv.LabelRun: vmRun})
	vm, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "docker", Kind: agentenv.KindVM, Run: vmRun})
	if err != nil {
		t.Fatal(err)
	}
	defer r.mgr.TeardownIDs(context.Background(), vm.ID) //nolint:errcheck // checked below
	first, second := r.name(), r.name()
	a, err := r.d.Deploy(t.Context(), r.kvEnv(""), deploy.Options{Provider: "docker", Mode: deploy.ModeVM, Into: vm.ID, Name: first})
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.d.Deploy(t.Context(), r.kvEnv(""), deploy.Options{Provider: "docker", Mode: deploy.ModeVM, Into: vm.ID, Name: second})
	if err != nil {
		t.Fatalf("second deploy into the vm: %v", err)
	}
	ca, cb := envtest.Connect(t, a.GatewayURL, a.Token), envtest.Connect(t, b.GatewayURL, b.Token)
	envtest.Call(t, ca, "set", map[string]any{"key": "k", "value": "first"})
	envtest.Call(t, cb, "set", map[string]any{"key": "k", "value": "second"})
	if got := envtest.Call(t, ca, "get", map[string]any{"key": "k"}); !strings.Contains(got, "first") {
		t.Errorf("the first gateway reads %q: it reached the other deployment's kv", got)
	}
	ca.Close()
	assertReceiptClean(t, teardown(t, r, first), false)
	if got := envtest.Call(t, cb, "get", map[string]any{"key": "k"}); !strings.Contains(got, "second") {
		t.Errorf("after the first's teardown the second reads %q", got)
	}
	cb.Close()
	assertReceiptClean(t, teardown(t, r, second), false)
	left, _ := dockertest.Leftovers(t.Context(), r.dc, map[string]string{agentenv.LabelRecord: vm.ID})
	if len(left) != 1 || !strings.HasPrefix(left[0], "network") {
		t.Errorf("in the caller's VM after both teardowns: %v, want only its network", left)
	}
	if _, err := r.docker.Get(t.Context(), vm.SandboxID); err != nil {
		t.Errorf("the caller's VM: %v, want it left alone", err)
	}
	if _, err := r.mgr.TeardownIDs(t.Context(), vm.ID); err != nil {
		t.Error(err)
	}
}

// TestSeed002KilledOutOfBandCountsAsTerminated: sandboxes removed or killed behind our back
// are torn down as already gone: nothing failed, nothing "may still be up".
func TestSeed002KilledOutOfBandCountsAsTerminated(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id := r.name()
	res, err := r.d.Deploy(t.Context(), r.kvEnv(""), deploy.Options{Provider: "docker", Name: id})
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := r.mgr.Ledger().List(t.Context(), agentenv.Filter{Deployment: res.Doc.ID})
	for _, rec := range recs {
		switch rec.Role {
		case "mcp_server":
			if _, err := r.dc.ContainerRemove(t.Context(), rec.SandboxID, client.ContainerRemoveOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
		case "gateway":
			if _, err := r.dc.ContainerKill(t.Context(), rec.SandboxID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	rc := teardown(t, r, id)
	assertReceiptClean(t, rc, true)
	if rc.Count(agentenv.OutcomeAlreadyGone) != 2 {
		t.Errorf("receipt %+v, want the server and the gateway already gone", rc.Items)
	}
}

func TestReattachContract(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	kill := func(id string, role agentenv.Role) {
		recs, _ := r.mgr.Ledger().List(t.Context(), agentenv.Filter{Deployment: id})
		for _, rec := range recs {
			if rec.Role == role {
				if _, err := r.dc.ContainerKill(t.Context(), rec.SandboxID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	var wg sync.WaitGroup
	single, multi := r.name(), r.name()
	for _, c := range []struct {
		id  string
		env *spec.Env
	}{{single, r.notesEnv(false)}, {multi, r.notesEnv(true)}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.d.Deploy(t.Context(), c.env, deploy.Options{Provider: "docker", Name: c.id}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if _, _, err := r.d.Reattach(t.Context(), single); err != nil {
		t.Fatalf("reattach a healthy deployment: %v", err)
	}
	kill(single, "service_db")
	if _, warnings, err := r.d.Reattach(t.Context(), single); err != nil || len(warnings) != 1 {
		t.Errorf("reattach with a dead service DB = %v, warnings %v; want a warning and no error", err, warnings)
	}
	kill(single, "mcp_server")
	if _, _, err := r.d.Reattach(t.Context(), single); err == nil {
		t.Error("reattach with a dead MCP server succeeded, want an error")
	}
	kill(multi, "service_db")
	if _, _, err := r.d.Reattach(t.Context(), multi); err == nil {
		t.Error("reattach of a multi env with a dead service DB succeeded, want an error")
	}
	assertReceiptClean(t, teardown(t, r, single), true)
	assertReceiptClean(t, teardown(t, r, multi), true)
}

// TestStoppedTeardownKeepsTheRestForTheNext: a teardown cut short by a hard stop leaves the
// records it had not reached for the next teardown, which finishes the job.
func TestStoppedTeardownKeepsTheRestForTheNext(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id := r.name()
	if _, err := r.d.Deploy(t.Context(), r.kvEnv(""), deploy.Options{Provider: "docker", Name: id}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	close(stop)
	rc, err := r.d.Teardown(cleanup.WithHardStop(t.Context(), stop), id)
	if err == nil || rc.Count(agentenv.OutcomeLeft) == 0 {
		t.Fatalf("stopped teardown = %+v, %v; want items left", rc, err)
	}
	assertReceiptClean(t, teardown(t, r, id), false)
}

func TestMissingImageFailsBeforeAnythingIsCreated(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	id := r.name()
	env := r.parse("kv", fmt.Sprintf(`name: kv
servers:
  - name: kv
    image: agentenv-no-such-image:0
    port: 8080
gateway:
  image: %s
`, r.runtime))
	_, err := r.d.Deploy(t.Context(), env, deploy.Options{Provider: "docker", Name: id})
	if err == nil || !strings.Contains(err.Error(), "mcp_server kv") || !strings.Contains(err.Error(), "agentenv-no-such-image:0") {
		t.Fatalf("Deploy = %v, want an error naming the server and its image", err)
	}
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Deploy error does not wrap ErrInvalid: %v", err)
	}
	recs, _ := r.mgr.Ledger().List(t.Context(), agentenv.Filter{Deployment: id})
	if len(recs) != 0 {
		t.Errorf("records made before the image check: %v", recs)
	}
}

// TestMultiEnvWithAStdioServer deploys three servers behind one gateway, one of them a stdio
// server run behind the built-in bridge, and calls each through the gateway.
func TestMultiEnvWithAStdioServer(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	_, bin := dockertest.RuntimeImage(t)
	id := r.name()
	env := r.parse("multi", fmt.Sprintf(`name: multi
servers:
  - name: notes
    image: %[1]s
    command: [/agentenv, serve, notes, --listen, ":8080"]
    port: 8080
    database: true
  - name: kv
    image: %[1]s
    command: [/agentenv, serve, kv, --listen, ":8080"]
    port: 8080
  - name: kv-stdio
    image: %[1]s
    transport: stdio
    command: [/agentenv, serve, kv, --stdio]
service_db:
  image: %[2]s
gateway:
  image: %[1]s
  tool_names: prefix
`, r.runtime, postgresImage))
	res, err := r.d.Deploy(t.Context(), env, deploy.Options{Provider: "docker", Name: id, BridgeBinary: bin})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Doc.Servers) != 3 || res.Doc.Tools != 12 {
		t.Errorf("servers %v with %d tools, want 3 servers and 12 tools", res.Doc.Servers, res.Doc.Tools)
	}
	cs := envtest.Connect(t, res.GatewayURL, res.Token)
	envtest.Call(t, cs, "kv-stdio__set", map[string]any{"key": "via", "value": "stdio"})
	if got := envtest.Call(t, cs, "kv-stdio__get", map[string]any{"key": "via"}); !strings.Contains(got, "stdio") {
		t.Errorf("kv-stdio__get = %s", got)
	}
	if got := envtest.Call(t, cs, "kv__get", map[string]any{"key": "via"}); strings.Contains(got, "stdio") {
		t.Errorf("the http kv sees the stdio kv's key: %s", got)
	}
	envtest.Call(t, cs, "notes__add_note", map[string]any{"title": "multi", "body": "three servers"})
	assertReceiptClean(t, teardown(t, r, id), false)
}

// roleHeader sets the AgentEnv-Role header on every request, as a caller spoofing a role would.
type roleHeader struct {
	base http.RoundTripper
	role string
}

func (t roleHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("AgentEnv-Role", t.role)
	return t.base.RoundTrip(r)
}

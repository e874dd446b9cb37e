// Package deploytest holds the checks the integration tests of every provider make of a deploy
// (cancelled at each of its steps in turn, it must leave nothing), beside package deploy as
// net/http/httptest is beside net/http.
//
// A cloud provider with VM mode and an emulator (e2b, tensorlake) runs the whole VM-mode
// deploy test by giving a VMKit: its name, a label for the engine, and Start, which starts its
// emulator with the given emuvm.Backend behind its Docker-capable sandboxes and returns a
// VMCloud (the provider on it, the emulator, how to read a sandbox's labels and VM removal
// errors, the emulator's port-proxy URL prefix). Then
//
//	func TestVMModeDeployOfNotes(t *testing.T) { deploytest.VMModeOfNotes(t, vmKit) }
//
// deploys examples/notes on real DinD VMs, calls it through the gateway, execs in the stack,
// tears it down and cancels it at each progress event, checking that nothing is left on the
// emulator, in the ledger or on the engine. DinDCloud gives the same set-up to a provider's
// other VM tests; VMHost is the DinD host alone (the CLI tests use it).
package deploytest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/spec"
)

// CancelAtEachEvent deploys env with opts once for each of the events progress events an
// uncancelled deploy reports, cancelling the k-th deploy at its k-th event, in parallel subtests
// named eventKK. Each deploy must fail with context.Canceled, the one cancelled at the last
// event too (Deploy undoes a deploy that finished as it was cancelled); one that succeeds is
// reported and torn down. Then settled(t, id) checks that nothing of it is left. name(t, k) draws the k-th
// deployment id. opts.Name and opts.Progress are the helper's.
func CancelAtEachEvent(t *testing.T, d *deploy.Deployer, env *spec.Env, opts deploy.Options, events int,
	name func(t *testing.T, k int) string, settled func(t *testing.T, id string)) {
	t.Helper()
	if events == 0 {
		t.Fatal("no uncancelled deploy to count the progress events of")
	}
	CancelAtEvents(t, d, env, opts, events, everyEvent(events), name, settled)
}

// everyEvent numbers the events of a deploy, 1 to events.
func everyEvent(events int) []int {
	at := make([]int, events)
	for k := range at {
		at[k] = k + 1
	}
	return at
}

// VMEvents is the sample of a VM-mode deploy's events progress events that a cloud's own code
// decides: the first (the cloud's VM is made; a cancel removes it through the cloud), the second
// (the first call into the VM, through the cloud's exec and port proxy), the third (the next
// component starts, the first on agentenv's runtime image, which a cloud whose VM image lacks it
// uploads from this host) and the last (the whole stack up, the gateway probed through the
// proxy). Between them the stack inside the VM is the same code on every cloud, which one
// provider's test sweeps event by event; cancelling every cloud at all of them would start a
// dozen nested engines per cloud and reach no new path.
func VMEvents(events int) []int {
	var at []int
	for _, k := range []int{1, 2, 3, events} {
		if k >= 1 && k <= events && (len(at) == 0 || at[len(at)-1] < k) {
			at = append(at, k)
		}
	}
	return at
}

// CancelAtEvents is CancelAtEachEvent for the events numbered in at (1-based, ascending) of
// the deploy's events.
func CancelAtEvents(t *testing.T, d *deploy.Deployer, env *spec.Env, opts deploy.Options, events int, at []int,
	name func(t *testing.T, k int) string, settled func(t *testing.T, id string)) {
	t.Helper()
	if len(at) == 0 {
		t.Fatal("no progress event to cancel at")
	}
	start := time.Now()
	t.Run("cancel", func(t *testing.T) {
		for _, k := range at {
			t.Run(fmt.Sprintf("event%02d", k), func(t *testing.T) {
				t.Parallel()
				id := name(t, k)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var mu sync.Mutex
				seen, at := 0, ""
				o := opts
				o.Name = id
				o.Progress = func(e deploy.Event) {
					mu.Lock()
					defer mu.Unlock()
					if seen++; seen == k {
						at = e.String()
						cancel()
					}
				}
				_, err := d.Deploy(ctx, env, o)
				mu.Lock()
				t.Logf("cancelled at event %d: %s", k, at)
				mu.Unlock()
				if err == nil {
					t.Errorf("Deploy cancelled at event %d succeeded", k)
					if _, err := d.Teardown(context.Background(), id); err != nil {
						t.Errorf("teardown: %v", err)
					}
				} else if !errors.Is(err, context.Canceled) {
					t.Errorf("Deploy cancelled at event %d = %v, want context.Canceled", k, err)
				}
				settled(t, id)
			})
		}
	})
	t.Logf("%d cancelled deploys took %s", len(at), time.Since(start).Round(time.Millisecond))
}

// Example loads the example env examples/NAME/env.yaml of this repository with every component
// that runs agentenv's own image (servers, db-mcp, the gateway) on image instead, this
// checkout's runtime image in a test.
func Example(t testing.TB, name, image string) *spec.Env {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("deploytest: cannot find the repository")
	}
	env, err := spec.Load(filepath.Join(filepath.Dir(self), "..", "..", "examples", name, "env.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range env.Servers {
		env.Servers[i].Image = image
	}
	env.ServiceDB.DBMCP.Image = image
	env.Gateway.Image = image
	return env
}

// Deploy deploys env with opts (opts.Progress is the helper's), failing the test with every
// progress line if it fails, and logging them and the time taken if it does not. It returns the
// deployment and the number of progress events, which CancelAtEachEvent takes.
func Deploy(t testing.TB, d *deploy.Deployer, env *spec.Env, opts deploy.Options) (*deploy.Result, int) {
	t.Helper()
	var mu sync.Mutex
	var lines []string
	caller := opts.Progress
	opts.Progress = func(e deploy.Event) {
		if caller != nil {
			caller(e)
		}
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, e.String())
	}
	start := time.Now()
	res, err := d.Deploy(t.Context(), env, opts)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		t.Fatalf("Deploy: %v\n%s", err, strings.Join(lines, "\n"))
	}
	t.Logf("deployed in %s:\n%s", time.Since(start).Round(time.Millisecond), strings.Join(lines, "\n"))
	return res, len(lines)
}

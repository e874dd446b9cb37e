package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
)

// Names of the state store's measures.
const (
	DeployStore   = "deploy to ready: agentenv env deploy, service DB in a state store"
	TeardownStore = "teardown: agentenv env teardown, service DB in a state store"
)

// storeDeploys deploys the env with its service DB a database of a local state store (`agentenv
// state up`, started for the bench and taken down after), alternating with deploys that give
// it a container, so the two are measured over the same phase of the shared machine. The
// first deploy on the store makes the env's template (init_sql and seed run once); it is
// measured apart.
func (b *bencher) storeDeploys(ctx context.Context) {
	sd, st := Measure{Name: DeployStore}, Measure{Name: TeardownStore}
	sd.Note = "the env's template made before the first sample; each deploy copies it"
	cd := Measure{Name: DeployAgentenv + " (alternating with the store's)"}
	defer func() {
		for _, m := range []Measure{sd, st, cd} {
			b.res.add(m)
		}
	}()
	name := fmt.Sprintf("agentenv-bench-state-%x", rand.Uint32())
	r, err := b.agentenv(ctx, deployTimeout, "state", "up", "--json", "--name", name)
	var up struct{ DSN string }
	if err == nil {
		err = json.Unmarshal([]byte(r.stdout), &up)
	}
	if err != nil {
		b.problem("agentenv state up: %v", err)
		sd.Skipped, st.Skipped, cd.Skipped = err.Error(), err.Error(), err.Error()
		return
	}
	defer func() {
		if _, err := b.agentenv(cleanup.Unbounded(ctx), shortTimeout, "state", "down", "--force", "--name", name, "--state-store", up.DSN); err != nil {
			b.problem("agentenv state down: %v", err)
		}
	}()
	deploy := func(store bool) (took, down time.Duration, ok bool) {
		// The store's deployments are torn down (and gc'd) with the store configured, as a
		// user's config or AGENTENV_STATE_STORE would have it; the others never see it.
		var env []string
		if store {
			env = []string{"AGENTENV_STATE_STORE=" + up.DSN}
		}
		run := func(timeout time.Duration, args ...string) (result, error) {
			return b.exec(ctx, timeout, env, b.cfg.Binary, append([]string{"--ledger", filepath.Join(b.cfg.Dir, "ledger.bolt")}, args...)...)
		}
		r, err := run(deployTimeout, "env", "deploy", b.cfg.EnvFile, "--json", "--ttl", "30m")
		var dep struct{ ID string }
		if err == nil {
			err = json.Unmarshal([]byte(r.stdout), &dep)
		}
		if err != nil {
			b.problem("agentenv env deploy (store %v): %v", store, err)
			return 0, 0, false
		}
		td, err := run(shortTimeout, "env", "teardown", dep.ID)
		if err != nil {
			b.problem("agentenv env teardown %s: %v", dep.ID, err)
			return 0, 0, false
		}
		return r.took, td.took, true
	}
	// The template.
	first, _, ok := deploy(true)
	if !ok {
		return
	}
	sd.Note += fmt.Sprintf(" (the first, which made it, took %s)", first.Round(time.Millisecond))
	for range b.cfg.Reps {
		if ctx.Err() != nil {
			return
		}
		if took, _, ok := deploy(false); ok {
			cd.Samples = append(cd.Samples, took)
		}
		if took, down, ok := deploy(true); ok {
			sd.Samples = append(sd.Samples, took)
			st.Samples = append(st.Samples, down)
		}
	}
}

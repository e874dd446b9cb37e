package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/soak"
)

// LoadFigure is one soak round of concurrent episodes as the bench ran it.
type LoadFigure struct {
	Episodes int       `json:"episodes"`
	Store    bool      `json:"store"` // the service DBs were databases of a state store
	Passed   int       `json:"passed"`
	Holds    bool      `json:"holds"` // every episode passed, nothing left, no false warning
	Load     soak.Load `json:"load"`
	Failure  string    `json:"failure,omitempty"`
}

// load runs one steady soak round of LoadEpisodes concurrent episodes without a store, then
// one with (Config.StateStore, else a store started for it and removed after), and keeps what
// each cost: throughput, deploy to ready, queue wait, peak memory.
func (b *bencher) load(ctx context.Context) {
	for _, withStore := range []bool{false, true} {
		if ctx.Err() != nil {
			return
		}
		env := os.Environ()
		if withStore {
			dsn, stop, err := b.loadStore(ctx)
			if err != nil {
				b.problem("load with a store: %v", err)
				return
			}
			defer stop()
			env = append(env, "AGENTENV_STATE_STORE="+dsn)
		}
		dir := filepath.Join(b.cfg.Dir, fmt.Sprintf("load-%d-store-%t", b.cfg.LoadEpisodes, withStore))
		rep, err := soak.Run(ctx, soak.Config{
			Binary: b.cfg.Binary, Dir: dir, Engine: b.cfg.Engine, Episodes: b.cfg.LoadEpisodes, Rounds: 1,
			Kinds: []soak.Kind{soak.Steady}, Image: b.soakImage(), Env: env, Logger: b.cfg.Logger,
		})
		if err != nil || len(rep.Rounds) == 0 {
			b.problem("load of %d episodes (store %t): %v", b.cfg.LoadEpisodes, withStore, err)
			continue
		}
		r := rep.Rounds[0]
		b.res.Load = append(b.res.Load, LoadFigure{Episodes: b.cfg.LoadEpisodes, Store: withStore, Passed: r.Passed,
			Holds: r.Holds(), Load: r.Load, Failure: r.Failure()})
	}
}

// loadStore returns the load measure's store: Config.StateStore, else one started with
// `agentenv state up --name` and the function that removes it.
func (b *bencher) loadStore(ctx context.Context) (string, func(), error) {
	if b.cfg.StateStore != "" {
		return b.cfg.StateStore, func() {}, nil
	}
	name := fmt.Sprintf("agentenv-bench-load-%x", rand.Uint32())
	r, err := b.agentenv(ctx, deployTimeout, "state", "up", "--json", "--name", name)
	var up struct{ DSN string }
	if err == nil {
		err = json.Unmarshal([]byte(r.stdout), &up)
	}
	if err != nil {
		return "", nil, fmt.Errorf("agentenv state up: %w", err)
	}
	return up.DSN, func() {
		if _, err := b.agentenv(cleanup.Unbounded(ctx), shortTimeout, "state", "down", "--force", "--name", name, "--state-store", up.DSN); err != nil {
			b.problem("agentenv state down: %v", err)
		}
	}, nil
}

// soakImage is the bench's image of agentenv's own components when it is not the default.
func (b *bencher) soakImage() string {
	if b.cfg.Image == "agentenv:dev" {
		return ""
	}
	return b.cfg.Image
}

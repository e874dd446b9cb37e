package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/soak"
)

// stateStore returns the DSN of the store measures: Config.StateStore, else a local store the
// bench starts once with `agentenv state up --json` (and stopStore removes).
func (b *bencher) stateStore(ctx context.Context) (string, error) {
	if b.store != "" {
		return b.store, nil
	}
	if b.cfg.StateStore != "" {
		b.store = b.cfg.StateStore
		return b.store, nil
	}
	r, err := b.agentenv(ctx, deployTimeout, "state", "up", "--json")
	if err != nil {
		return "", err
	}
	var out struct{ DSN string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.DSN == "" {
		return "", fmt.Errorf("agentenv state up printed no dsn: %q", tail(r.stdout, 200))
	}
	b.store, b.started = out.DSN, true
	return b.store, nil
}

// stopStore removes the store the bench started, if it did.
func (b *bencher) stopStore() {
	if !b.started {
		return
	}
	ctx, cancel := cleanup.Context(context.Background(), shortTimeout)
	defer cancel()
	if _, err := b.agentenv(ctx, shortTimeout, "state", "down", "--force"); err != nil {
		b.problem("agentenv state down: %v", err)
	}
	b.started = false
}

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
// one with, and keeps what each cost: throughput, deploy to ready, queue wait, peak memory.
func (b *bencher) load(ctx context.Context) {
	for _, withStore := range []bool{false, true} {
		if ctx.Err() != nil {
			return
		}
		env := os.Environ()
		if withStore {
			dsn, err := b.stateStore(ctx)
			if err != nil {
				b.problem("load with a store: %v", err)
				return
			}
			env = append(env, "AGENTENV_STATE_STORE="+dsn)
		}
		dir := filepath.Join(b.cfg.Dir, fmt.Sprintf("load-%d-store-%t", b.cfg.LoadEpisodes, withStore))
		rep, err := soak.Run(ctx, soak.Config{
			Binary: b.cfg.Binary, Dir: dir, Engine: b.cfg.Engine, Episodes: b.cfg.LoadEpisodes, Rounds: 1,
			Kinds: []soak.Kind{soak.Steady}, Image: b.imageForSoak(), Env: env, Logger: b.cfg.Logger,
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

// imageForSoak is the bench's image of agentenv's own components when it is not the default.
func (b *bencher) imageForSoak() string {
	if b.cfg.Image == "agentenv:dev" {
		return ""
	}
	return b.cfg.Image
}

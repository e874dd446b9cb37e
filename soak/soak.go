// Package soak runs agentenv's promise as a measurement: rounds of concurrent graded episodes
// of a built-in task (the notes env deployed behind its gateway, a scripted agent, verifiers,
// teardown), some of them disturbed on purpose, and after every round a count, taken from the
// container engine and the file system rather than from the ledger, of what the round left
// behind, plus a check of every teardown warning the processes logged.
//
// Each round runs its episodes in a child `agentenv run` process, so that the process itself
// can be interrupted (SIGINT) or killed (SIGKILL, followed by `agentenv gc`), exactly as a user
// or a crash would. Everything the child makes carries its agentenv.owner label, which is how a
// round finds its containers, networks and volumes on an engine shared with other users.
//
//	steady     nothing injected; every episode must pass
//	kill       a quarter of the episodes lose a sandbox (docker kill or docker rm -f) mid-round
//	interrupt  the runner receives SIGINT mid-round and must tear everything down itself
//	crash      the runner receives SIGKILL mid-round; `agentenv gc` must then find everything
package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"
)

// Defaults of Config.
const (
	DefaultEpisodes     = 32
	DefaultRoundTimeout = 10 * time.Minute
	DefaultStopTimeout  = 3 * time.Minute
	DefaultGCTimeout    = 3 * time.Minute
)

// Config says what to soak and how.
type Config struct {
	Binary   string // the agentenv binary that runs the episodes and gc; required
	Dir      string // holds the task files, the soak's own ledger and state, and each round's logs; required
	Engine   Engine // the engine the provider deploys to; required
	Episodes int    // concurrent episodes per round; DefaultEpisodes if 0
	Rounds   int    // rounds; len(Kinds) if 0
	Kinds    []Kind // round kinds, used in turn; every kind (Kinds) if empty
	Provider string // provider of the episodes; the child's provider.default if empty
	Image    string // replaces agentenv:dev in the built-in env when not empty
	// Env is the environment of the child processes (XDG_STATE_HOME is set on top of it);
	// os.Environ() if nil. A hidden AGENTENV_FAULTS in it reaches the runner, which is how the
	// harness's own tests make the provider leak.
	Env []string

	RoundTimeout time.Duration // bound on one round's runner process; DefaultRoundTimeout if 0
	StopTimeout  time.Duration // how long an interrupted runner may take to exit; DefaultStopTimeout if 0
	GCTimeout    time.Duration // bound on gc after a crash; DefaultGCTimeout if 0

	// KeepLeftovers leaves what a round left for inspection; by default soak counts it, then
	// removes it, so that the next round (and the next user of the engine) starts clean.
	KeepLeftovers bool
	Seed          uint64       // seeds the choice of victims in kill rounds; drawn if 0
	Logger        *slog.Logger // nil means discard
	Progress      func(Round)  // receives each round when it is counted; may be nil
}

func (c *Config) defaults() error {
	if c.Binary == "" || c.Dir == "" || c.Engine == nil {
		return errors.New("soak: Binary, Dir and Engine are required")
	}
	if c.Episodes <= 0 {
		c.Episodes = DefaultEpisodes
	}
	if len(c.Kinds) == 0 {
		c.Kinds = Kinds
	}
	if c.Rounds <= 0 {
		c.Rounds = len(c.Kinds)
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.RoundTimeout <= 0 {
		c.RoundTimeout = DefaultRoundTimeout
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.GCTimeout <= 0 {
		c.GCTimeout = DefaultGCTimeout
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// soaker runs the rounds of one soak.
type soaker struct {
	cfg   Config
	task  string // the task folder
	state string // XDG_STATE_HOME of the children
	rnd   *rand.Rand
}

// Run runs the soak and returns its report. The error is non-nil only when the soak could not
// be set up; what went wrong in a round is in the report. When ctx is cancelled, the round under
// way interrupts its runner, still counts what is left, and no further round starts.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	start := time.Now()
	rep := Report{Episodes: cfg.Episodes}
	s := &soaker{cfg: cfg, state: filepath.Join(cfg.Dir, "state"), rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1))}
	var err error
	if s.task, err = WriteTask(cfg.Dir, cfg.Image); err != nil {
		return rep, fmt.Errorf("soak: %w", err)
	}
	if err := os.MkdirAll(s.state, 0o700); err != nil {
		return rep, fmt.Errorf("soak: %w", err)
	}
	for i := range cfg.Rounds {
		if ctx.Err() != nil {
			break
		}
		kind := cfg.Kinds[i%len(cfg.Kinds)]
		cfg.Logger.Info("soak round", "round", i+1, "kind", kind, "episodes", cfg.Episodes)
		r := s.round(ctx, i+1, kind)
		rep.Rounds = append(rep.Rounds, r)
		if cfg.Progress != nil {
			cfg.Progress(r)
		}
	}
	rep.Elapsed = time.Since(start)
	rep.finish()
	if ctx.Err() != nil && len(rep.Rounds) < cfg.Rounds {
		rep.Holds = false
		if rep.First == "" {
			rep.First = fmt.Sprintf("interrupted after %d of %d rounds", len(rep.Rounds), cfg.Rounds)
		}
	}
	return rep, nil
}

// Package bench measures agentenv side by side with the plain tools on the same machine, in one
// run: deploy to ready and teardown of an env against `docker compose` on its rendered compose
// file, the gateway's tools/call overhead against direct calls, `agentenv run hello`, gc of 50
// orphans after kill -9, one sandbox create/terminate against `docker run -d`/`docker rm -f`, a
// Harbor task's episode against the same steps with the docker CLI, with the Harbor corpus
// checked cold and warm, and a website with the browser (web.go): its deploy against compose,
// browser calls through the gateway against direct, the sidecar's memory, deployments at once.
// It reports medians, p95 and ratios, and writes them into BENCHMARKS.md.
//
// Every command runs as a child process, the way a user runs it, with a ledger and a state
// folder of the bench's own; every wait is bounded.
package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/soak"
)

// ComposeHelp says how to get the docker compose v5 plugin this machine lacks.
const ComposeHelp = "docker compose v5 is not installed: build it with `sh bench/build-compose.sh` " +
	"(v5.6.0 from its Go module, into $DOCKER_CONFIG/cli-plugins or ~/.docker/cli-plugins; about 2 minutes), then run the bench again"

// Config says what to measure.
type Config struct {
	Binary     string      // the agentenv binary under test; required
	Dir        string      // the bench's ledger, state, and rendered files; required
	EnvFile    string      // the env deployed side by side with docker compose; required
	Image      string      // image of the bare sandboxes and orphans; agentenv:dev if empty
	RepoDir    string      // the agentenv checkout: the gateway figures and the orphans' holder come from it; both are skipped if empty
	DockerHost string      // engine of the orphans' holder; default $DOCKER_HOST, else the local socket
	Engine     soak.Engine // counts what the orphans left; required
	Reps       int         // samples of each deploy and sandbox measure; 5 if 0
	Hellos     int         // runs of `agentenv run hello`; 10 if 0
	Orphans    int         // sandboxes left by the killed process; 50 if 0
	// StateStore is the PostgreSQL server of the load measure's round with a store (DSN); if
	// empty, the bench starts one with `agentenv state up --name` and removes it after.
	StateStore string
	// LoadEpisodes is how many concurrent episodes the load measure runs, without and with a
	// state store; 16 if 0.
	LoadEpisodes int
	// ImageMap maps the Harbor tasks' base images onto local ones, as FROM=TO; DefaultImageMap
	// if empty.
	ImageMap []string
	// WebEnv is the env of the web step, a website with the browser (DefaultWebEnv if empty);
	// its folder is copied with agentenv:dev replaced by Image.
	WebEnv string
	// WebCalls is how many browser_navigate and browser_snapshot calls the web step times on
	// each path (DefaultWebCalls if 0).
	WebCalls int
	// WebConcurrency are the counts of browser deployments the web step runs at once
	// (DefaultWebConcurrency if empty).
	WebConcurrency []int
	// Only, if not empty, names the measures to take, of Steps' names; the others are skipped.
	Only   []string
	Logger *slog.Logger
	// Progress receives a line as each measure starts; may be nil.
	Progress func(string)
}

// Results are the figures of one bench run.
type Results struct {
	Date        time.Time       `json:"date"`
	Machine     Machine         `json:"machine"`
	Measures    []Measure       `json:"measures"`
	Comparisons []Comparison    `json:"comparisons"`
	Gateway     []GatewayFigure `json:"gateway,omitempty"`
	GatewayNote string          `json:"gateway_note,omitempty"`
	Orphans     OrphanFigure    `json:"orphans"`
	Load        []LoadFigure    `json:"load,omitempty"`
	Harbor      []CorpusFigure  `json:"harbor,omitempty"`
	Web         *WebFigures     `json:"web,omitempty"`
	Problems    []string        `json:"problems,omitempty"`
	Elapsed     time.Duration   `json:"elapsed_ns"`
	byName      map[string]int  // index into Measures
}

// Measure returns the measure named name, or a zero one.
func (r *Results) Measure(name string) Measure {
	if i, ok := r.byName[name]; ok {
		return r.Measures[i]
	}
	return Measure{Name: name}
}

func (r *Results) add(m Measure) {
	if r.byName == nil {
		r.byName = map[string]int{}
	}
	r.byName[m.Name] = len(r.Measures)
	r.Measures = append(r.Measures, m)
}

// Names of the measures.
const (
	DeployAgentenv   = "deploy to ready: agentenv env deploy"
	TeardownAgentenv = "teardown: agentenv env teardown"
	DeployCompose    = "deploy: docker compose up -d --wait"
	TeardownCompose  = "teardown: docker compose down -t 1"
	Hello            = "agentenv run hello"
	CreateAgentenv   = "sandbox create: agentenv sandbox create"
	RemoveAgentenv   = "sandbox terminate: agentenv sandbox rm"
	CreateDocker     = "sandbox create: docker run -d"
	RemoveDocker     = "sandbox terminate: docker rm -f"
	GCOrphans        = "agentenv gc of the orphans of a kill -9"
)

// Steps are the names of the measures, in the order Run takes them, for Config.Only.
var Steps = []string{"deploy", "store", "gateway", "hello", "sandbox", "gc", "load", "harbor", "web"}

func (c *Config) defaults() error {
	if c.Binary == "" || c.Dir == "" || c.EnvFile == "" || c.Engine == nil {
		return errors.New("bench: Binary, Dir, EnvFile and Engine are required")
	}
	for _, name := range c.Only {
		if !slices.Contains(Steps, name) {
			return fmt.Errorf("bench: no measure %q; the measures are %s", name, strings.Join(Steps, ", "))
		}
	}
	if c.Image == "" {
		c.Image = "agentenv:dev"
	}
	if c.Reps <= 0 {
		c.Reps = 5
	}
	if c.Hellos <= 0 {
		c.Hellos = 10
	}
	if c.Orphans <= 0 {
		c.Orphans = 50
	}
	if c.LoadEpisodes <= 0 {
		c.LoadEpisodes = 16
	}
	if c.WebEnv == "" {
		c.WebEnv = DefaultWebEnv
	}
	if c.WebCalls <= 0 {
		c.WebCalls = DefaultWebCalls
	}
	if len(c.WebConcurrency) == 0 {
		c.WebConcurrency = DefaultWebConcurrency
	}
	if len(c.ImageMap) == 0 {
		c.ImageMap = DefaultImageMap()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	return nil
}

// Run takes every measure in turn. A measure that cannot be taken is recorded as skipped, or as
// a problem, and the others still run; the error is non-nil only for a bad Config.
func Run(ctx context.Context, cfg Config) (Results, error) {
	if err := cfg.defaults(); err != nil {
		return Results{}, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "state"), 0o700); err != nil {
		return Results{}, fmt.Errorf("bench: %w", err)
	}
	start := time.Now()
	b := &bencher{cfg: cfg}
	b.res.Date = start.UTC()
	b.res.Machine = Describe(ctx)
	steps := []struct {
		name, say string
		fn        func(context.Context)
	}{
		{"deploy", "deploy and teardown, agentenv and docker compose", b.deploys},
		{"store", "deploy and teardown with the service DB in a state store, and without", b.storeDeploys},
		{"gateway", "gateway tools/call against direct calls (go test -bench)", b.gateway},
		{"hello", "agentenv run hello", b.hello},
		{"sandbox", "sandbox create and terminate, agentenv and docker", b.sandboxes},
		{"gc", fmt.Sprintf("gc of %d orphans after kill -9", cfg.Orphans), b.orphans},
		{"load", fmt.Sprintf("%d concurrent episodes, without and with a state store", cfg.LoadEpisodes), b.load},
		{"harbor", "a Harbor task's episode, agentenv and by hand; the Harbor corpus checked cold and warm", b.harbor},
		{"web", "the shop with the browser: deploy against docker compose, browser calls through the gateway and direct, the sidecar's memory, deployments at once", b.web},
	}
	for _, s := range steps {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, s.name) {
			continue
		}
		if ctx.Err() != nil {
			b.problem("interrupted before: %s", s.say)
			continue
		}
		cfg.Progress(s.say)
		s.fn(ctx)
	}
	b.res.Comparisons = append([]Comparison{
		{"deploy to ready", DeployAgentenv, DeployCompose},
		{"teardown", TeardownAgentenv, TeardownCompose},
		{"deploy to ready, state store", DeployStore, DeployAgentenv + " (alternating with the store's)"},
		{"deploy to ready, state store vs compose", DeployStore, DeployCompose},
		{"sandbox create", CreateAgentenv, CreateDocker},
		{"sandbox terminate", RemoveAgentenv, RemoveDocker},
		{"harbor episode", HarborEpisodeAgentenv, HarborEpisodeByHand},
	}, b.res.Comparisons...)
	b.res.Elapsed = time.Since(start)
	return b.res, nil
}

// bencher runs the measures of one Run.
type bencher struct {
	cfg Config
	res Results
}

func (b *bencher) problem(format string, args ...any) {
	b.res.Problems = append(b.res.Problems, fmt.Sprintf(format, args...))
}

// result is what a child process did.
type result struct {
	stdout, stderr string
	took           time.Duration
}

// exec runs name with args, bounded by timeout, with the bench's state folder, and times it.
// A non-zero exit is an error that carries the end of stderr.
func (b *bencher) exec(ctx context.Context, timeout time.Duration, env []string, name string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(b.cfg.Dir, "state")), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	r := result{out.String(), errb.String(), time.Since(start)}
	if err != nil {
		return r, fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, tail(r.stderr, 400))
	}
	return r, nil
}

// agentenv runs the binary under test on the bench's ledger, with the bench's image as the
// runtime image of agentenv's own components (a Harbor task's egress proxy among them).
func (b *bencher) agentenv(ctx context.Context, timeout time.Duration, args ...string) (result, error) {
	args = append([]string{"--ledger", filepath.Join(b.cfg.Dir, "ledger.bolt")}, args...)
	return b.exec(ctx, timeout, []string{config.EnvName("images.runtime") + "=" + b.cfg.Image}, b.cfg.Binary, args...)
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

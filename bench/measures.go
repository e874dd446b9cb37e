package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/lifecycle"
)

// Bounds of the child processes.
const (
	deployTimeout = 5 * time.Minute
	shortTimeout  = 2 * time.Minute
	holdTimeout   = 10 * time.Minute
	buildTimeout  = 5 * time.Minute // go build of the orphans' holder, cold
)

// deploys alternates agentenv and docker compose deploys of the same env, so that a slow phase of
// the shared machine weighs on both.
func (b *bencher) deploys(ctx context.Context) {
	ad, at := Measure{Name: DeployAgentenv}, Measure{Name: TeardownAgentenv}
	cd, ct := Measure{Name: DeployCompose}, Measure{Name: TeardownCompose}
	ad.Note = "until every MCP server answers and the gateway's tools probe passes"
	cd.Note = "until every container runs and the service DB's healthcheck passes"
	defer func() {
		for _, m := range []Measure{ad, at, cd, ct} {
			b.res.add(m)
		}
	}()
	b.sideBySide(ctx, b.cfg.EnvFile, b.cfg.Reps, &ad, &at, &cd, &ct)
}

// sideBySide deploys envFile reps times with agentenv (ad, then its teardown at) and each time
// right after with docker compose on the file `agentenv env render --compose` makes of it (cd,
// then its down ct), adding the samples to the four measures.
func (b *bencher) sideBySide(ctx context.Context, envFile string, reps int, ad, at, cd, ct *Measure) {
	compose := composeAvailable(ctx)
	var file, project string
	if compose != nil {
		cd.Skipped, ct.Skipped = ComposeHelp, ComposeHelp
	} else {
		project = fmt.Sprintf("agentenv-bench-%x", rand.Uint32())
		file = filepath.Join(b.cfg.Dir, "compose-"+project+".yaml")
		r, err := b.agentenv(ctx, shortTimeout, "env", "render", envFile, "--compose", "--project", project)
		if err == nil {
			err = os.WriteFile(file, []byte(r.stdout), 0o600)
		}
		if err != nil {
			b.problem("render compose file: %v", err)
			compose = err
			cd.Skipped, ct.Skipped = err.Error(), err.Error()
		}
	}
	composeEnv := []string{"AGENTENV_GATEWAY_TOKEN=bench-" + project}
	for range reps {
		if ctx.Err() != nil {
			return
		}
		r, err := b.agentenv(ctx, deployTimeout, "env", "deploy", envFile, "--json", "--ttl", "30m")
		var dep struct{ ID string }
		if err == nil {
			err = json.Unmarshal([]byte(r.stdout), &dep)
		}
		if err != nil {
			b.problem("agentenv env deploy: %v", err)
			return
		}
		ad.Samples = append(ad.Samples, r.took)
		if r, err = b.agentenv(ctx, shortTimeout, "env", "teardown", dep.ID); err != nil {
			b.problem("agentenv env teardown %s: %v", dep.ID, err)
			return
		}
		at.Samples = append(at.Samples, r.took)

		if compose != nil {
			continue
		}
		up, err := b.exec(ctx, deployTimeout, composeEnv, "docker", "compose", "-f", file, "-p", project, "up", "-d", "--wait")
		if err == nil {
			cd.Samples = append(cd.Samples, up.took)
		} else {
			b.problem("docker compose up: %v", err)
		}
		down, derr := b.exec(cleanup.Unbounded(ctx), shortTimeout, composeEnv, "docker", "compose", "-f", file, "-p", project, "down", "-t", "1", "-v")
		if derr != nil {
			b.problem("docker compose down: %v", derr)
			return
		}
		if err == nil {
			ct.Samples = append(ct.Samples, down.took)
		} else {
			return
		}
	}
}

// composeAvailable returns nil when `docker compose` runs.
func composeAvailable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "compose", "version").CombinedOutput(); err != nil {
		return fmt.Errorf("docker compose version: %w: %s", err, tail(string(out), 200))
	}
	return nil
}

// GatewayFigure is one line of the gateway's Go benchmark: one path at one session count in
// one repetition.
type GatewayFigure struct {
	Path     string  `json:"path"` // "direct", "gateway" or "proxy" (a plain reverse proxy)
	Sessions int     `json:"sessions"`
	Run      int     `json:"run"`       // repetition, from 1; direct and gateway of one run ran back to back
	NsPerOp  float64 `json:"ns_per_op"` // wall time per call over all sessions (throughput)
	P50      float64 `json:"p50_us"`    // latency of one call, µs
	P99      float64 `json:"p99_us"`
	CPU      float64 `json:"cpu_us"`    // CPU time per call of every process on the path, µs
	Bytes    float64 `json:"bytes_op"`  // bytes the client allocated per call
	Allocs   float64 `json:"allocs_op"` // allocations of the client per call
	// The middle process's own figures per call (the gateway's, or the proxy's).
	MidCPU    float64 `json:"mid_cpu_us,omitempty"`
	MidAllocs float64 `json:"mid_allocs_op,omitempty"`
	MidBytes  float64 `json:"mid_bytes_op,omitempty"`
}

// GatewayRuns is how often the gateway benchmark alternates direct and gateway at each session
// count, so that its ratios come with a range.
const GatewayRuns = 3

var benchLine = regexp.MustCompile(`^BenchmarkCall/sessions=(\d+)/(direct|gateway|proxy)\S*\s+\d+\s+(.*)$`)

// ParseGatewayBench reads the figures of `go test -bench BenchmarkCall -benchmem` output,
// numbering the repetitions of each path and session count in order.
func ParseGatewayBench(out string) []GatewayFigure {
	var figs []GatewayFigure
	runs := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		f := GatewayFigure{Path: m[2], Sessions: n}
		runs[m[1]+m[2]]++
		f.Run = runs[m[1]+m[2]]
		fields := strings.Fields(m[3])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			switch fields[i+1] {
			case "ns/op":
				f.NsPerOp = v
			case "p50-µs":
				f.P50 = v
			case "p99-µs":
				f.P99 = v
			case "cpu-µs/op":
				f.CPU = v
			case "B/op":
				f.Bytes = v
			case "allocs/op":
				f.Allocs = v
			case "gw-cpu-µs/op":
				f.MidCPU = v
			case "gw-allocs/op":
				f.MidAllocs = v
			case "gw-B/op":
				f.MidBytes = v
			}
		}
		figs = append(figs, f)
	}
	return figs
}

// gateway runs the gateway's Go benchmark: one echo backend, tools/call over 1, 8, 64 and 256
// client sessions, straight to the backend and through the gateway (real HTTP on loopback),
// side by side, GatewayRuns times.
func (b *bencher) gateway(ctx context.Context) {
	if b.cfg.RepoDir == "" {
		b.res.GatewayNote = "skipped: run from a checkout of agentenv (the figures come from go test -bench ./gateway)"
		return
	}
	cmd := []string{"go", "test", "-run", "^$", "-bench", "^BenchmarkCall$", "-benchtime", "4000x", "-benchmem",
		"./gateway/", "-args", "-gateway.runs", strconv.Itoa(GatewayRuns)}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Dir = b.cfg.RepoDir
	out, err := c.CombinedOutput()
	if err != nil {
		b.problem("%s: %v: %s", strings.Join(cmd, " "), err, tail(string(out), 400))
		return
	}
	b.res.Gateway = ParseGatewayBench(string(out))
	b.res.GatewayNote = strings.Join(cmd, " ")
	if len(b.res.Gateway) == 0 {
		b.problem("go test -bench printed no BenchmarkCall figures:\n%s", tail(string(out), 400))
	}
}

// hello runs `agentenv run hello` again and again.
func (b *bencher) hello(ctx context.Context) {
	m := Measure{Name: Hello, Note: "process provider, no Docker"}
	defer func() { b.res.add(m) }()
	for range b.cfg.Hellos {
		r, err := b.agentenv(ctx, shortTimeout, "run", "hello")
		if err != nil {
			b.problem("agentenv run hello: %v", err)
			return
		}
		m.Samples = append(m.Samples, r.took)
	}
}

// sandboxes creates and terminates one bare sandbox of the same image and command, through
// agentenv and through the docker CLI, alternately.
func (b *bencher) sandboxes(ctx context.Context) {
	ac, ar := Measure{Name: CreateAgentenv, Note: "ledger record first, labels, verified by listing"}, Measure{Name: RemoveAgentenv, Note: "verified receipt"}
	dc, dr := Measure{Name: CreateDocker}, Measure{Name: RemoveDocker}
	defer func() {
		for _, m := range []Measure{ac, ar, dc, dr} {
			b.res.add(m)
		}
	}()
	label := fmt.Sprintf("agentenv.bench=%x", rand.Uint32())
	for range b.cfg.Reps {
		r, err := b.agentenv(ctx, shortTimeout, "sandbox", "create", "--image", b.cfg.Image, "--ttl", "30m", "--json", "--", "/agentenv", "serve", "kv")
		var sb struct{ Record string }
		if err == nil {
			err = json.Unmarshal([]byte(r.stdout), &sb)
		}
		if err != nil {
			b.problem("agentenv sandbox create: %v", err)
			return
		}
		ac.Samples = append(ac.Samples, r.took)
		if r, err = b.agentenv(cleanup.Unbounded(ctx), shortTimeout, "sandbox", "rm", sb.Record); err != nil {
			b.problem("agentenv sandbox rm: %v", err)
			return
		}
		ar.Samples = append(ar.Samples, r.took)

		r, err = b.exec(ctx, shortTimeout, nil, "docker", "run", "-d", "--label", label, b.cfg.Image, "/agentenv", "serve", "kv")
		if err != nil {
			b.problem("docker run: %v", err)
			return
		}
		dc.Samples = append(dc.Samples, r.took)
		id := strings.TrimSpace(r.stdout)
		if r, err = b.exec(cleanup.Unbounded(ctx), shortTimeout, nil, "docker", "rm", "-f", id); err != nil {
			b.problem("docker rm -f: %v", err)
			return
		}
		dr.Samples = append(dr.Samples, r.took)
	}
}

// OrphanFigure is what gc did with the sandboxes of a process killed with SIGKILL.
type OrphanFigure struct {
	Created int           `json:"created"` // sandboxes the process had made
	Create  time.Duration `json:"create_ns"`
	GC      time.Duration `json:"gc_ns"`
	Left    []string      `json:"left"` // what the engine still listed after gc
}

// holdPackage is the program that makes the orphans, built from the checkout.
const holdPackage = "./bench/internal/hold"

// orphans builds and starts the holder (package bench/internal/hold), which creates the
// sandboxes and waits; kills it with SIGKILL once they are all up; then times `agentenv gc` and
// counts what the engine still lists.
func (b *bencher) orphans(ctx context.Context) {
	m := Measure{Name: GCOrphans, Note: fmt.Sprintf("%d containers, owner killed with SIGKILL", b.cfg.Orphans)}
	defer func() { b.res.add(m) }()
	if b.cfg.RepoDir == "" {
		b.problem("gc of orphans: skipped: run from a checkout of agentenv (the orphans' holder is built from %s)", holdPackage)
		return
	}
	hold := filepath.Join(b.cfg.Dir, "agentenv-bench-hold")
	bctx, bcancel := context.WithTimeout(ctx, buildTimeout)
	defer bcancel()
	build := exec.CommandContext(bctx, "go", "build", "-o", hold, holdPackage)
	build.Dir = b.cfg.RepoDir
	if out, err := build.CombinedOutput(); err != nil {
		b.problem("build the orphans' holder (go build %s): %v: %s", holdPackage, err, tail(string(out), 400))
		return
	}
	hctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	cmd := exec.CommandContext(hctx, hold, "--ledger", filepath.Join(b.cfg.Dir, "ledger.bolt"),
		"--n", strconv.Itoa(b.cfg.Orphans), "--image", b.cfg.Image, "--docker-host", b.cfg.DockerHost)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(b.cfg.Dir, "state"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.problem("orphans' holder: %v", err)
		return
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.problem("orphans' holder: %v", err)
		return
	}
	owner := ""
	if o, err := lifecycle.OwnerOf(cmd.Process.Pid); err == nil {
		owner = o.String()
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := false
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") {
				ok = true
				break
			}
		}
		ready <- ok
		for sc.Scan() {
		}
	}()
	var ok bool
	select {
	case ok = <-ready:
	case <-hctx.Done():
	}
	b.res.Orphans.Create = time.Since(start)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if !ok {
		b.problem("the orphans' holder did not report its %d sandboxes up within %s", b.cfg.Orphans, holdTimeout)
	}
	if owner != "" {
		lctx, lcancel := context.WithTimeout(ctx, time.Minute)
		rs, _ := b.cfg.Engine.List(lctx, map[string]string{agentenv.LabelOwner: owner})
		lcancel()
		for _, r := range rs {
			if r.Kind == "container" {
				b.res.Orphans.Created++
			}
		}
	}
	r, err := b.agentenv(cleanup.Unbounded(ctx), deployTimeout, "gc")
	if err != nil {
		// Still timed: gc exits 1 for any error of the pass, also one that spared the orphans.
		b.problem("agentenv gc: %v", err)
	}
	m.Samples = append(m.Samples, r.took)
	b.res.Orphans.GC = r.took
	if owner == "" {
		b.problem("could not name the owner of the orphans' holder: its leftovers were not counted")
		return
	}
	lctx, lcancel := cleanup.Context(ctx, time.Minute)
	defer lcancel()
	rs, err := b.cfg.Engine.List(lctx, map[string]string{agentenv.LabelOwner: owner})
	if err != nil {
		b.problem("count orphans left: %v", err)
	}
	b.res.Orphans.Left = []string{}
	for _, r := range rs {
		b.res.Orphans.Left = append(b.res.Orphans.Left, r.String())
	}
	if len(rs) > 0 {
		b.problem("gc left %d of the orphans: %v", len(rs), b.res.Orphans.Left)
		_ = b.cfg.Engine.RemoveAll(lctx, map[string]string{agentenv.LabelOwner: owner})
	}
}

package task

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/buildctx"
	"github.com/agentenv/agentenv/lifecycle"
)

var sandboxTypes = []string{TypeDeploySandbox}

// deploySandbox creates a bare sandbox through the lifecycle manager, of an image or of one
// built from a Dockerfile beside the task file.
type deploySandbox struct {
	Provider string `yaml:"provider"` // provider or comma chain; the run's --provider if empty
	Image    string `yaml:"image"`
	// Build is, instead of Image, an image built from a Dockerfile on the first provider of a
	// chain: by the provider's engine (Imager, its image kept for the same context's next
	// builds), or, on a VM-mode provider that builds in its VM (Capabilities.BuildInVM), inside
	// the sandbox's own fresh VM, where it goes with the VM (no cache across VMs).
	Build    *sandboxBuild     `yaml:"build"`
	Command  []string          `yaml:"command"`
	Env      map[string]string `yaml:"env"`
	TTL      string            `yaml:"ttl"`       // lifetime until gc may remove it; lifecycle's default if empty
	CPUs     float64           `yaml:"cpus"`      // CPUs; the provider's default if 0
	MemoryMB int               `yaml:"memory_mb"` // memory in MiB; the provider's default if 0
	// BuildTimeoutSec bounds the build (lifecycle.DefaultBuildTimeout if 0); the step's own
	// timeout bounds the build and the create together.
	BuildTimeoutSec int `yaml:"build_timeout_sec"`
	// CapAdd are capabilities the sandbox keeps (every other is dropped where the provider
	// can), from ContainerCaps only: what images written for Docker expect to have (apt-get,
	// useradd, su and chown need them), never more.
	CapAdd []string `yaml:"cap_add"`
	// Network is a deploy_network step whose private network the sandbox joins, on that
	// network's provider; Aliases are the names the others on it reach the sandbox by.
	Network string   `yaml:"network"`
	Aliases []string `yaml:"aliases"`
	// Join are more deploy_network steps whose networks the sandbox joins beside Network's,
	// each with the names the others on it reach the sandbox by: a proxy between a network with
	// no route out and one with (a Harbor task's allowed_hosts). Only a provider that can join a
	// sandbox to more than one network (Capabilities.Join: docker) takes it.
	Join    []sandboxJoin `yaml:"join"`
	WorkDir string        `yaml:"workdir"` // working directory of the main process; the image's if empty
	// User is who the command (and what runs in the sandbox) runs as: a name, uid or uid:gid
	// the image knows; the image's user if empty. Only a provider that can (docker) takes it.
	User string `yaml:"user"`
	// Ports are container ports published on this host's loopback (127.0.0.1), each at a host
	// port the provider picks: the output endpoints maps each to its address, and a
	// serve_tools server with sandbox and port reaches an HTTP MCP server there.
	Ports []int `yaml:"ports"`
	// Healthcheck, if set, is run in the sandbox after the create until it passes; the step
	// ends when it has.
	Healthcheck *healthcheck `yaml:"healthcheck"`
	// WaitExit makes the step end once the sandbox's command has exited, and fail unless it
	// exited 0: a setup sandbox (compose's service_completed_successfully) that must finish
	// before its dependents start. The sandbox stays, exited, until the episode's teardown.
	WaitExit bool `yaml:"wait_exit"`
	// Volumes are deploy_volume steps' volumes mounted into the sandbox, on their provider.
	Volumes []sandboxVolume `yaml:"volumes"`
}

// sandboxJoin is one of deploy_sandbox's join: a deploy_network step and the sandbox's names
// on its network.
type sandboxJoin struct {
	Network string   `yaml:"network" task:"required"`
	Aliases []string `yaml:"aliases"`
}

// exitPoll is how often a wait_exit step asks whether its sandbox has exited.
const exitPoll = 250 * time.Millisecond

// ContainerCaps are the capabilities a container runtime gives a container by default (Docker's
// and containerd's set, without NET_RAW): the most a deploy_sandbox step may keep.
var ContainerCaps = []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}

// sandboxBuild is deploy_sandbox's build: a build context beside the task file.
type sandboxBuild struct {
	Context    string            `yaml:"context" task:"required"` // a folder, relative to the task file's, inside it
	Dockerfile string            `yaml:"dockerfile"`              // relative to context; Dockerfile if empty
	Args       map[string]string `yaml:"args"`                    // build arguments (ARG)
}

func (s *deploySandbox) Check() error {
	if err := checkNoHostEnv(s.Env); err != nil {
		return err
	}
	if s.TTL != "" {
		if d, err := time.ParseDuration(s.TTL); err != nil || d <= 0 {
			return fmt.Errorf("ttl: want a positive duration such as \"10m\", got %q", s.TTL)
		}
	}
	switch {
	case s.Build != nil && s.Image != "":
		return errors.New("set image or build, not both")
	case s.Build != nil && s.Build.Context == "":
		return errors.New("build.context: want the build context's folder, relative to the task file")
	case s.Build == nil && s.BuildTimeoutSec != 0:
		return errors.New("build_timeout_sec: only with build")
	case s.CPUs < 0:
		return fmt.Errorf("cpus: want 0 (the provider's default) or more, got %g", s.CPUs)
	case s.MemoryMB < 0:
		return fmt.Errorf("memory_mb: want 0 (the provider's default) or more, got %d", s.MemoryMB)
	case s.BuildTimeoutSec < 0:
		return fmt.Errorf("build_timeout_sec: want 0 (the default, %s) or more, got %d", lifecycle.DefaultBuildTimeout, s.BuildTimeoutSec)
	}
	if err := checkVolumes(s.Volumes); err != nil {
		return err
	}
	if len(s.Aliases) > 0 && s.Network == "" {
		return errors.New("aliases: only with network")
	}
	if len(s.Join) > 0 && s.Network == "" {
		return errors.New("join: only with network (the sandbox's first)")
	}
	for i, j := range s.Join {
		if j.Network == s.Network || slices.ContainsFunc(s.Join[:i], func(o sandboxJoin) bool { return o.Network == j.Network }) {
			return fmt.Errorf("join[%d].network: step %s is joined twice", i, j.Network)
		}
		for k, a := range j.Aliases {
			if !hostname.MatchString(a) {
				return fmt.Errorf("join[%d].aliases[%d]: %q is not a host name (letters, digits, '.', '_', '-')", i, k, a)
			}
		}
	}
	if strings.ContainsAny(s.User, " \t\n'\"") {
		return fmt.Errorf("user: %q is not a user name, uid or uid:gid", s.User)
	}
	if s.WaitExit && s.Healthcheck != nil {
		return errors.New("wait_exit: not with healthcheck (a sandbox that has exited runs no check)")
	}
	for i, p := range s.Ports {
		if p < 1 || p > 65535 {
			return fmt.Errorf("ports[%d]: want a port in 1-65535, got %d", i, p)
		}
		if slices.Contains(s.Ports[:i], p) {
			return fmt.Errorf("ports[%d]: %d is listed twice", i, p)
		}
	}
	for i, a := range s.Aliases {
		if !hostname.MatchString(a) {
			return fmt.Errorf("aliases[%d]: %q is not a host name (letters, digits, '.', '_', '-')", i, a)
		}
	}
	if s.Healthcheck != nil {
		if err := s.Healthcheck.check(); err != nil {
			return fmt.Errorf("healthcheck.%w", err)
		}
		if err := checkBinding("healthcheck.command", s.Healthcheck.Command, nil); err != nil {
			return err
		}
	}
	for i, c := range s.CapAdd {
		if !slices.Contains(ContainerCaps, strings.TrimPrefix(strings.ToUpper(c), "CAP_")) {
			return fmt.Errorf("cap_add[%d]: %q is not one a container has by default; want one of %s", i, c, strings.Join(ContainerCaps, ", "))
		}
	}
	return checkBinding("command", "", s.Command)
}

func (s *deploySandbox) Refs() []Ref {
	refs := volumeRefs(s.Volumes)
	if s.Network == "" {
		return refs
	}
	refs = append(refs, Ref{"network", s.Network, []string{TypeDeployNetwork}})
	for i, j := range s.Join {
		refs = append(refs, Ref{fmt.Sprintf("join[%d].network", i), j.Network, []string{TypeDeployNetwork}})
	}
	return refs
}

// hostname is what a network alias may be.
var hostname = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$`)

// capNames are caps as SandboxSpec.CapAdd takes them: upper case, without CAP_.
func capNames(caps []string) []string {
	var out []string
	for _, c := range caps {
		out = append(out, strings.TrimPrefix(strings.ToUpper(c), "CAP_"))
	}
	return out
}

// checkNoHostEnv refuses an env value that reads this host's environment ("env:NAME", as env
// files may): a step passes its values as they are, and the sandbox would get the literal text.
func checkNoHostEnv(env map[string]string) error {
	names := slices.Sorted(maps.Keys(env))
	for _, k := range names {
		if name, ok := strings.CutPrefix(env[k], "env:"); ok {
			return fmt.Errorf("env.%s: %q would reach the sandbox as that text: a task file's values are passed as they are (put %s in an env file's env, or give the value, or a <placeholder> from a seeds file)", k, env[k], name)
		}
	}
	return nil
}

// providers are the members of the provider chain a step that makes sandboxes names (the
// run's when it names none), refused if it takes the run off to the process provider.
func (sc *scope) providers(chain string) ([]string, error) {
	if sc.e.r.Manager == nil {
		return nil, fmt.Errorf("no lifecycle manager configured")
	}
	if err := switchesToProcess(sc.e.opts.Provider, chain); err != nil {
		return nil, err
	}
	if chain == "" {
		chain = sc.e.opts.Provider
	}
	if chain == "" {
		return nil, fmt.Errorf("no provider: set provider in the step or give the run one")
	}
	return sc.e.r.Manager.ParseChain(chain)
}

func (s *deploySandbox) Run(ctx context.Context, sc *scope) (Result, error) {
	m := sc.e.r.Manager
	members, err := sc.providers(s.Provider)
	if err != nil {
		return Result{}, err
	}
	network := ""
	if s.Network != "" {
		// The sandbox joins the network where the network is: its provider must be the step's.
		st := sc.state(s.Network)
		network = st.outputs["network"]
		if network == "" {
			return Result{}, fmt.Errorf("network: step %s made no network%s", s.Network, sc.e.failureOf(s.Network))
		}
		np := st.outputs["provider"]
		if !slices.Contains(members, np) {
			return Result{}, fmt.Errorf("network: step %s's network is on provider %s, this sandbox on %s: a sandbox joins a network on its own provider only: %w", s.Network, np, strings.Join(members, ","), agentenv.ErrInvalid)
		}
		members = []string{np}
	}
	mounts, members, err := sc.mounts(s.Volumes, members)
	if err != nil {
		return Result{}, err
	}
	var joins []agentenv.NetworkJoin
	for i, j := range s.Join {
		st := sc.state(j.Network)
		id := st.outputs["network"]
		if id == "" {
			return Result{}, fmt.Errorf("join[%d].network: step %s made no network%s", i, j.Network, sc.e.failureOf(j.Network))
		}
		if np := st.outputs["provider"]; np != members[0] {
			return Result{}, fmt.Errorf("join[%d].network: step %s's network is on provider %s, this sandbox on %s: a sandbox joins networks on its own provider only: %w", i, j.Network, np, members[0], agentenv.ErrInvalid)
		}
		joins = append(joins, agentenv.NetworkJoin{Network: id, Aliases: j.Aliases})
	}
	if s.Healthcheck != nil {
		for _, p := range members {
			if ok, err := m.Supports(p, agentenv.AbilityExec); err != nil || !ok {
				return Result{}, fmt.Errorf("healthcheck: provider %s cannot run commands in a sandbox: %w", p, agentenv.ErrInvalid)
			}
		}
	}
	out := map[string]string{}
	image := s.Image
	var vmBuild *agentenv.Build // built by the create, in the sandbox's VM
	if to, ok := buildctx.MapImage(sc.e.r.ImageMap, image); ok && s.Build == nil {
		image = to // the run's image map, as a build's FROM takes it
	}
	if s.Build != nil {
		// The image is built on one provider, so the sandbox is made there: the chain's first.
		members = members[:1]
		dir, err := sc.within("build.context", s.Build.Context)
		if err != nil {
			return Result{}, err
		}
		build := agentenv.Build{Context: dir, Dockerfile: s.Build.Dockerfile, Args: s.Build.Args, BaseMap: sc.e.r.ImageMap}
		inVM, err := buildsInVM(m, members[0])
		if err != nil {
			return Result{}, fmt.Errorf("build: %w", err)
		}
		if inVM {
			// Built by the create, inside the sandbox's own VM: no image record, no cache.
			image, vmBuild = "", &build
		} else {
			_, ref, built, err := m.BuildImage(ctx, lifecycle.BuildRequest{
				Provider: members[0], Build: build, Timeout: time.Duration(s.BuildTimeoutSec) * time.Second,
			})
			if err != nil {
				return Result{}, fmt.Errorf("build: %w", err)
			}
			image = ref
			out["image"], out["built"] = ref, strconv.FormatBool(built)
		}
	}
	pinned := ""
	if s.Build == nil && image == s.Image {
		pinned = sc.e.r.Pinned[image]
	}
	ttl, _ := time.ParseDuration(s.TTL)
	req := lifecycle.CreateRequest{
		Provider: members[0], Run: sc.e.id, Role: agentenv.TaskRole(sc.s.ID), TTL: ttl,
		Spec: agentenv.SandboxSpec{Image: image, Pinned: pinned, Build: vmBuild, Command: s.Command, Env: s.Env,
			CPUs: s.CPUs, Memory: int64(s.MemoryMB) << 20, CapAdd: capNames(s.CapAdd),
			Network: network, Aliases: s.Aliases, WorkDir: s.WorkDir, Ports: s.Ports, Join: joins, User: s.User, Mounts: mounts,
			PullAuth: sc.e.r.Logins.For(ctx, pinned)},
		BuildTimeout: time.Duration(s.BuildTimeoutSec) * time.Second,
	}
	rec, sb, err := sc.createSandbox(ctx, members, req)
	if err != nil {
		if vmBuild != nil {
			err = fmt.Errorf("build in the sandbox's vm: %w", err)
		}
		return Result{}, err
	}
	if vmBuild != nil {
		out["image"], out["built"] = sb.Image, "true"
	}
	if sb.ImageNote != "" {
		sc.log.Info("sandbox image", "step", sc.s.ID, "image", image, "how", sb.ImageNote)
	}
	out["sandbox_id"], out["record"], out["provider"] = sb.ID, rec.ID, rec.Provider
	if len(s.Ports) > 0 {
		eps := map[string]string{}
		for _, p := range s.Ports {
			port := strconv.Itoa(p)
			if sb.Endpoints[port] == "" {
				return Result{Outputs: out}, fmt.Errorf("ports: provider %s published no address for port %d: %w", rec.Provider, p, agentenv.ErrInvalid)
			}
			eps[port] = sb.Endpoints[port]
		}
		out["endpoints"] = marshal(eps)
	}
	if s.Build == nil {
		out["image"], out["built"] = image, "false"
	}
	if s.Healthcheck != nil {
		// The sandbox is the episode's now (torn down with it), healthy or not.
		if err := s.Healthcheck.wait(ctx, m, rec.ID, sc.log); err != nil {
			return Result{Outputs: out}, err
		}
	}
	if s.WaitExit {
		code, err := waitExit(ctx, m, rec.ID, sb)
		if err != nil {
			return Result{Outputs: out}, err
		}
		out["exit_code"] = strconv.Itoa(code)
		if code != 0 {
			logs, _ := m.Logs(ctx, rec.ID, 20)
			return Result{Outputs: out}, fmt.Errorf("wait_exit: the sandbox's command exited %d, want 0%s", code, logTail(logs))
		}
	}
	return Result{Outputs: out}, nil
}

// buildsInVM reports whether a build for a sandbox on provider is made by the sandbox's create,
// inside its own VM: the provider builds no images of its own (no Imager) but builds in its VM
// (Capabilities.BuildInVM). A provider with neither is left to BuildImage, which refuses it.
func buildsInVM(m *lifecycle.Manager, provider string) (bool, error) {
	imager, err := m.Supports(provider, agentenv.AbilityImageBuild)
	if err != nil || imager {
		return false, err
	}
	caps, err := m.Capabilities(provider)
	if err != nil {
		return false, err
	}
	return caps.BuildInVM, nil
}

// waitExit waits, within ctx, for the sandbox of record (created as sb) to exit, and returns its
// exit code.
func waitExit(ctx context.Context, m *lifecycle.Manager, record string, sb agentenv.Sandbox) (int, error) {
	for sb.State != agentenv.SandboxExited {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait_exit: the sandbox's command did not exit within the step's timeout: %w", ctx.Err())
		case <-time.After(exitPoll):
		}
		got, err := m.Get(ctx, record)
		switch {
		case errors.Is(err, agentenv.ErrGone) && got.State == agentenv.SandboxExited:
			sb = got
		case errors.Is(err, agentenv.ErrGone):
			return 0, fmt.Errorf("wait_exit: the sandbox finished, and its provider keeps no exit code: %w", err)
		case err != nil && ctx.Err() == nil:
			return 0, fmt.Errorf("wait_exit: %w", err)
		case err == nil:
			sb = got
		}
	}
	return sb.ExitCode, nil
}

// logTail is ": last lines: …" of a sandbox's logs, or "" when there are none.
func logTail(logs string) string {
	if logs = strings.TrimSpace(logs); logs == "" {
		return ""
	}
	return ": last lines: " + tail(logs, 500)
}

// execStep runs a command in a sandbox.
type execStep struct {
	Sandbox      string   `yaml:"sandbox" task:"required"` // the deploy_sandbox step
	Command      []string `yaml:"command" task:"required"` // argv
	AllowFailure bool     `yaml:"allow_failure"`           // a non-zero exit does not fail the step
}

func (s *execStep) Check() error {
	if len(s.Command) == 0 {
		return errors.New("command: want a non-empty argv list")
	}
	return checkBinding("command", "", s.Command)
}

func (s *execStep) Refs() []Ref { return []Ref{{"sandbox", s.Sandbox, sandboxTypes}} }

func (s *execStep) Run(ctx context.Context, sc *scope) (Result, error) {
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return Result{}, err
	}
	res, err := sc.e.r.Manager.Exec(ctx, ref.Record, s.Command)
	if err != nil {
		return Result{}, err
	}
	out := Result{Outputs: map[string]string{
		"exit_code": strconv.Itoa(res.ExitCode), "stdout": string(res.Stdout), "stderr": string(res.Stderr)}}
	if res.ExitCode != 0 && !s.AllowFailure {
		return out, fmt.Errorf("%s exited %d: %s", s.Command[0], res.ExitCode, tail(string(res.Stderr), 300))
	}
	return out, nil
}

// tail returns the last n bytes of s, trimmed.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// writeFile writes a file into a sandbox.
type writeFile struct {
	Sandbox string `yaml:"sandbox" task:"required"`
	Path    string `yaml:"path" task:"required"` // in the sandbox
	Content string `yaml:"content"`              // the file's text
	From    string `yaml:"from"`                 // or a local file, relative to the task file
}

func (s *writeFile) Check() error {
	if s.Content != "" && s.From != "" {
		return errors.New("set content or from, not both")
	}
	return nil
}

func (s *writeFile) Refs() []Ref { return []Ref{{"sandbox", s.Sandbox, sandboxTypes}} }

func (s *writeFile) Run(ctx context.Context, sc *scope) (Result, error) {
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return Result{}, err
	}
	data := []byte(s.Content)
	if s.From != "" {
		from, err := sc.within("from", s.From)
		if err != nil {
			return Result{}, err
		}
		if data, err = os.ReadFile(from); err != nil {
			return Result{}, fmt.Errorf("from: %w", err)
		}
	}
	if err := sc.e.r.Manager.WriteFile(ctx, ref.Record, s.Path, data); err != nil {
		return Result{}, err
	}
	return Result{Outputs: map[string]string{"bytes": strconv.Itoa(len(data))}}, nil
}

// fileContains checks a file in a sandbox.
type fileContains struct {
	Sandbox  string `yaml:"sandbox" task:"required"`
	Path     string `yaml:"path" task:"required"`
	Contains string `yaml:"contains"`
	Regex    string `yaml:"regex"`
}

func (s *fileContains) Check() error {
	if s.Contains == "" && s.Regex == "" {
		return errors.New("set contains or regex (or both)")
	}
	return checkRegex("regex", s.Regex)
}

func (s *fileContains) Refs() []Ref { return []Ref{{"sandbox", s.Sandbox, sandboxTypes}} }

func (s *fileContains) Run(ctx context.Context, sc *scope) (Result, error) {
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return Result{}, err
	}
	data, err := sc.e.r.Manager.ReadFile(ctx, ref.Record, s.Path)
	if errors.Is(err, agentenv.ErrNotFound) {
		return verdict([]Row{{Check: "file " + s.Path + " exists", Expected: "a file", Got: "no such file"}}), nil
	}
	if err != nil {
		return Result{}, err
	}
	return verdict(match("file "+s.Path, string(data), matcher{Contains: s.Contains, Regex: s.Regex})), nil
}

// commandSucceeds runs a command in a sandbox and checks that it exits 0 (and its stdout).
type commandSucceeds struct {
	Sandbox        string   `yaml:"sandbox" task:"required"`
	Command        []string `yaml:"command" task:"required"`
	StdoutContains string   `yaml:"stdout_contains"`
	StdoutRegex    string   `yaml:"stdout_regex"`
}

func (s *commandSucceeds) Check() error {
	if len(s.Command) == 0 {
		return errors.New("command: want a non-empty argv list")
	}
	if err := checkBinding("command", "", s.Command); err != nil {
		return err
	}
	return checkRegex("stdout_regex", s.StdoutRegex)
}

func (s *commandSucceeds) Refs() []Ref { return []Ref{{"sandbox", s.Sandbox, sandboxTypes}} }

func (s *commandSucceeds) Run(ctx context.Context, sc *scope) (Result, error) {
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return Result{}, err
	}
	res, err := sc.e.r.Manager.Exec(ctx, ref.Record, s.Command)
	if err != nil {
		return Result{}, err
	}
	got := strconv.Itoa(res.ExitCode)
	if res.ExitCode != 0 {
		got += ": " + tail(string(res.Stderr), 200)
	}
	rows := []Row{{Check: "exit code of " + strings.Join(s.Command, " "), Expected: "0", Got: got, Pass: res.ExitCode == 0}}
	rows = append(rows, match("stdout", string(res.Stdout), matcher{Contains: s.StdoutContains, Regex: s.StdoutRegex})...)
	return verdict(rows), nil
}

// teardownSandboxes tears down the sandboxes and deployments of named deploy steps mid-run.
type teardownSandboxes struct {
	Steps []string `yaml:"steps" task:"required"` // deploy_sandbox and deploy_env steps
}

func (s *teardownSandboxes) Check() error {
	if len(s.Steps) == 0 {
		return errors.New("steps: name at least one deploy step")
	}
	return nil
}

func (s *teardownSandboxes) Refs() []Ref {
	var out []Ref
	for i, id := range s.Steps {
		out = append(out, Ref{fmt.Sprintf("steps[%d]", i), id, []string{TypeDeploySandbox, TypeDeployEnv}})
	}
	return out
}

func (s *teardownSandboxes) Run(ctx context.Context, sc *scope) (Result, error) {
	e := sc.e
	rc := agentenv.Receipt{Started: time.Now().UTC()}
	var errs []error
	var records []string
	for _, id := range s.Steps {
		e.mu.Lock()
		sb, isSandbox := e.sandboxes[id]
		env := e.envs[id]
		e.mu.Unlock()
		switch {
		case isSandbox:
			records = append(records, sb.Record)
		case env != nil && !env.tornDown:
			if e.r.Deployer == nil {
				errs = append(errs, fmt.Errorf("%s: no env deployer", id))
				continue
			}
			e.keepGatewayTrajectory(ctx, id, env.DeployedEnv)
			drc, err := e.r.Deployer.Teardown(ctx, env.ID)
			rc.Items = append(rc.Items, drc.Items...)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
				continue
			}
			e.mu.Lock()
			env.tornDown = true
			e.mu.Unlock()
		}
	}
	if len(records) > 0 {
		mrc, err := e.r.Manager.TeardownIDs(ctx, records...)
		rc.Items = append(rc.Items, mrc.Items...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	rc.Finished = time.Now().UTC()
	n := rc.Count(agentenv.OutcomeTerminated) + rc.Count(agentenv.OutcomeAlreadyGone)
	out := Result{Outputs: map[string]string{"receipt": marshal(rc), "terminated": strconv.Itoa(n)}}
	return out, errors.Join(errs...)
}

// matcher is the text checks a verifier can make; every non-empty one is a row.
type matcher struct {
	Contains string
	Regex    string
	Equals   *string
}

// match checks got against m, one row per check.
func match(what, got string, m matcher) []Row {
	var rows []Row
	if m.Contains != "" {
		rows = append(rows, Row{Check: what + " contains", Expected: m.Contains, Got: clip(got), Pass: strings.Contains(got, m.Contains)})
	}
	if m.Regex != "" {
		re, err := regexp.Compile(m.Regex)
		rows = append(rows, Row{Check: what + " matches", Expected: m.Regex, Got: clip(got), Pass: err == nil && re.MatchString(got)})
	}
	if m.Equals != nil {
		rows = append(rows, Row{Check: what + " equals", Expected: *m.Equals, Got: clip(got), Pass: got == *m.Equals})
	}
	return rows
}

// clip shortens what a row records of a long value.
func clip(s string) string {
	const n = 500
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func checkRegex(field, re string) error {
	if re == "" {
		return nil
	}
	if _, err := regexp.Compile(re); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// createSandbox creates req's sandbox on the first of members that can (the chain when there
// are several), and registers it under the step's id to be torn down with the episode.
func (sc *scope) createSandbox(ctx context.Context, members []string, req lifecycle.CreateRequest) (agentenv.Record, agentenv.Sandbox, error) {
	m := sc.e.r.Manager
	var rec agentenv.Record
	var sb agentenv.Sandbox
	var err error
	if len(members) > 1 {
		rec, sb, err = m.CreateChain(ctx, members, req)
	} else {
		rec, sb, err = m.Create(ctx, req)
	}
	if err != nil {
		return rec, sb, err
	}
	sc.e.mu.Lock()
	sc.e.sandboxes[sc.s.ID] = sandboxRef{Record: rec.ID, Provider: rec.Provider, SandboxID: sb.ID, Endpoints: sb.Endpoints}
	sc.e.mu.Unlock()
	return rec, sb, nil
}

package smolvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/ctxerr"
)

// Machine states, as smolvm reports them.
const (
	stateCreated = "created" // made, never started
	stateRunning = "running"
	stateStopped = "stopped"
)

// Files agentenv keeps in a machine: its labels (JSON), and for a bare sandbox the exit status
// of its command, which the workload's wrapper writes when the command ends (smolvm keeps the
// machine running and says nothing of a workload that exited). Both are on the machine's
// persistent overlay, not under /tmp, which the workload's container mounts over.
const (
	labelsFile = "/etc/agentenv/labels.json"
	exitFile   = "/etc/agentenv/exit"
)

// labelMode is the label, kept only in labelsFile, that marks a VM-mode machine.
const (
	labelMode = "agentenv.smol_vm.mode"
	modeVM    = "vm"
	modeBare  = "bare"
)

// portSpec is smolvm's PortSpec: a host port published to a guest port.
type portSpec struct {
	Host  int `json:"host"`
	Guest int `json:"guest"`
}

// envVar is smolvm's EnvVar.
type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// restartSpec is smolvm's RestartSpec.
type restartSpec struct {
	Policy string `json:"policy"`
}

// createRequest is the body of POST /machines (CreateMachineRequest), with only the fields
// agentenv sets: smolvm refuses an unknown field (422) from v1.22.2, and ignored one before.
type createRequest struct {
	Name       string       `json:"name"`
	Image      string       `json:"image,omitempty"`
	Entrypoint []string     `json:"entrypoint,omitempty"`
	Cmd        []string     `json:"cmd,omitempty"`
	Env        []envVar     `json:"env,omitempty"`
	Workdir    string       `json:"workdir,omitempty"`
	CPUs       int          `json:"cpus,omitempty"`
	MemoryMB   int64        `json:"memoryMb,omitempty"`
	StorageGB  int          `json:"storageGb,omitempty"`
	Network    bool         `json:"network"`
	Ports      []portSpec   `json:"ports,omitempty"`
	Restart    *restartSpec `json:"restart,omitempty"`
}

// machineInfo is smolvm's MachineInfo, as create, start, get and list answer it.
type machineInfo struct {
	Name      string     `json:"name"`
	State     string     `json:"state"`
	CPUs      int        `json:"cpus"`
	MemoryMB  int64      `json:"memoryMb"`
	Ports     []portSpec `json:"ports"`
	Network   bool       `json:"network"`
	CreatedAt int64      `json:"createdAt"`
}

// listResponse is the answer of GET /machines.
type listResponse struct {
	Machines []machineInfo `json:"machines"`
}

// execRequest is the body of POST /machines/{id}/exec (ExecRequest, which refuses unknown fields).
type execRequest struct {
	Command     []string `json:"command"`
	Env         []envVar `json:"env,omitempty"`
	TimeoutSecs int64    `json:"timeoutSecs,omitempty"`
	// Background runs the command detached and answers its PID at once: smolvm's way of
	// running a daemon that outlives the request.
	Background bool `json:"background,omitempty"`
}

// execResponse is ExecResponse. HTTP 200 says only that the command was run: its exitCode is
// the outcome.
type execResponse struct {
	ExitCode  int    `json:"exitCode"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	StdoutB64 []byte `json:"stdoutB64"` // base64 on the wire; byte-exact
	StderrB64 []byte `json:"stderrB64"`
}

// uploadResponse is FileUploadResponse.
type uploadResponse struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// Create makes a bare sandbox: a machine named spec.Name from spec.Image (Config.Image if empty) whose workload is
// spec.Command (wrapped so that its exit status is kept in the machine), with spec.Env,
// spec.WorkDir and spec.Ports published on free ports of this host; then starts it, waits until
// it runs commands, and writes its labels into it, read back to check. The requests run on a
// detached context bounded by CreateTimeout, so Create always learns what smolvm made: if ctx
// ends meanwhile, or anything after the create fails, the machine is deleted before Create
// returns. A bad spec is ErrInvalid and nothing is made; a server that does not answer,
// ErrUnavailable.
//
// smolvm has no private networks, and files written before the workload runs are lost (its
// documented trap), so spec.Network, spec.Aliases and spec.Files are refused; a command is
// required (the image's own entrypoint is replaced by the wrapper).
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if err := p.check(spec); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("smol_vm: create %s: %w", spec.Name, err)
	}
	if spec.Image == "" {
		spec.Image = p.cfg.Image
	}
	if spec.Image == "" || len(spec.Command) == 0 {
		return agentenv.Sandbox{}, fmt.Errorf("smol_vm: create %s: want an image (the spec's or provider.smol_vm.image) and a command (the workload's wrapper replaces the image's entrypoint): %w", spec.Name, agentenv.ErrInvalid)
	}
	for _, port := range spec.Ports {
		if port <= 0 || port > 65535 {
			return agentenv.Sandbox{}, fmt.Errorf("smol_vm: create %s: port %d: want 1-65535: %w", spec.Name, port, agentenv.ErrInvalid)
		}
	}
	req := createRequest{
		Name: spec.Name, Image: spec.Image, Entrypoint: wrapper(), Cmd: spec.Command,
		Env: envList(spec.Env), Workdir: spec.WorkDir, Network: true,
		CPUs: int(math.Ceil(spec.CPUs)), MemoryMB: spec.Memory >> 20, Restart: &restartSpec{Policy: "never"},
	}
	labels := spec.LabelsWithExpiry()
	labels[labelMode] = modeBare
	mi, err := p.create(ctx, req, spec.Ports, labels, nil)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	return p.sandbox(mi, labels, nil), nil
}

// wrapper is the workload's entrypoint: it runs the command ("$@", the machine's cmd) and
// writes its exit status to exitFile once it ends, then exits with it.
func wrapper() []string {
	dir := exitFile[:strings.LastIndex(exitFile, "/")]
	return []string{"/bin/sh", "-c", `"$@"; code=$?; mkdir -p ` + dir + ` && echo $code >` + exitFile + `.new && mv ` + exitFile + `.new ` + exitFile + `; exit $code`, "agentenv"}
}

// envList is env as smolvm's list of EnvVar, in key order.
func envList(env map[string]string) []envVar {
	var out []envVar
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, envVar{Name: k, Value: env[k]})
	}
	return out
}

// pickPorts publishes each guest port on a free port of this host, as smolvm publishes a
// machine's ports at create and never after. The ports stay reserved in this Provider until
// done is called (once the start has bound them, or failed), so that concurrent creates do not
// pick the same; another process may still take one, which the start then reports.
func (p *Provider) pickPorts(guest []int) (_ []portSpec, done func(), _ error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []portSpec
	unreserve := func() {
		for _, ps := range out {
			delete(p.picked, ps.Host)
		}
	}
	for _, g := range guest {
		h, err := freePort()
		for err == nil && p.picked[h] {
			h, err = freePort()
		}
		if err == nil && (g <= 0 || g > 65535) {
			err = fmt.Errorf("port %d: want 1-65535: %w", g, agentenv.ErrInvalid)
		}
		if err != nil {
			unreserve()
			return nil, nil, err
		}
		p.picked[h] = true
		out = append(out, portSpec{Host: h, Guest: g})
	}
	return out, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		unreserve()
	}, nil
}

// freePort returns a TCP port of this host nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w: %w", err, agentenv.ErrUnavailable)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// check validates spec before anything is sent.
func (p *Provider) check(spec agentenv.SandboxSpec) error {
	if !validName(spec.Name) {
		return fmt.Errorf("machine name %q: want letters, digits, '_' and single '-' (at most 128, not ending with '-'): %w", spec.Name, agentenv.ErrInvalid)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return fmt.Errorf("label %s=%q, want the record id: %w", agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	if spec.Network != "" || len(spec.Aliases) > 0 || len(spec.Files) > 0 {
		return fmt.Errorf("networks, aliases and files are not supported (smolvm has no private networks, and a file written before a machine's workload runs is lost): %w", agentenv.ErrInvalid)
	}
	if spec.CPUs < 0 || spec.CPUs > 255 || spec.Memory < 0 {
		return fmt.Errorf("cpus %g, memory %d: %w", spec.CPUs, spec.Memory, agentenv.ErrInvalid)
	}
	return nil
}

// portAttempts bounds the creates of one machine whose start found a published port taken.
const portAttempts = 3

// create sends req with guest published on free ports of this host, starts the machine (again,
// on fresh ports, when one was taken meanwhile: smolvm answers 409 PORT_IN_USE, which its docs
// say to retry on a freshly allocated port), waits until it runs commands, writes labels into it
// and runs setup (if not nil) on it; see Create for what it guarantees.
func (p *Provider) create(ctx context.Context, req createRequest, guest []int, labels map[string]string, setup func(context.Context) error) (machineInfo, error) {
	record := req.Name
	if err := ctx.Err(); err != nil {
		return machineInfo{}, fmt.Errorf("smol_vm: create %s: %w", record, err)
	}
	log := p.log.With("record_id", record, "image", req.Image)
	cctx, cancel := cleanup.Detached(ctx, p.cfg.CreateTimeout)
	defer cancel()
	var mi machineInfo
	var err error
	for attempt := 1; ; attempt++ {
		var done func()
		if req.Ports, done, err = p.pickPorts(guest); err != nil {
			return machineInfo{}, fmt.Errorf("smol_vm: create %s: %w", record, err)
		}
		log.Debug("create machine", "attempt", attempt, "ports", req.Ports)
		mi, err = p.createAndStart(ctx, cctx, req)
		done()
		if err == nil || !portTaken(err) || attempt == portAttempts || ctx.Err() != nil {
			break
		}
		log.Debug("a published port was taken before the start; creating the machine again on others", "err", err)
	}
	if err != nil {
		return machineInfo{}, err
	}
	// The rest stops at the first failure, or as soon as ctx ends.
	for _, step := range []func() error{
		func() error { return p.awaitAgent(cctx, record) },
		func() error { return p.writeLabels(cctx, record, labels) },
		func() error {
			if setup == nil {
				return nil
			}
			return setup(cctx)
		},
	} {
		if err = ctx.Err(); err == nil {
			err = step()
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		p.rel.Release(ctx, record, record)
		return machineInfo{}, fmt.Errorf("smol_vm: create %s: %w", record, ctxerr.Prefer(ctx, kind(err)))
	}
	if mi.State == "" {
		mi.State = stateRunning
	}
	log.Debug("machine created")
	return mi, nil
}

// createAndStart sends req and starts the machine, on cctx (detached, bounded). If ctx ends
// first, or the start fails, the machine is deleted; a create whose answer did not come is
// looked for by name and deleted.
func (p *Provider) createAndStart(ctx, cctx context.Context, req createRequest) (machineInfo, error) {
	var mi machineInfo
	err := p.call(cctx, http.MethodPost, "/machines", req, &mi)
	if err != nil {
		if st := apierr.Status(err); (st < 400 || st >= 500) && !errors.Is(err, agentenv.ErrInvalid) {
			// The answer may be lost though the machine exists: find it by name and delete it.
			// (A server that could not be reached, ErrInvalid, got nothing.)
			p.rel.Record(ctx, req.Name)
		}
		return machineInfo{}, fmt.Errorf("smol_vm: create %s: %w", req.Name, kind(err))
	}
	if err = ctx.Err(); err == nil {
		err = p.call(cctx, http.MethodPost, machinePath(req.Name, "/start"), nil, &mi)
	}
	if err != nil {
		p.rel.Release(ctx, req.Name, req.Name)
		if portTaken(err) {
			err = fmt.Errorf("a published port was taken before the machine started: %w: %w", agentenv.ErrUnavailable, err)
		}
		return machineInfo{}, fmt.Errorf("smol_vm: create %s: %w", req.Name, ctxerr.Prefer(ctx, kind(err)))
	}
	return mi, nil
}

// portTaken reports whether err is smolvm's 409 PORT_IN_USE at a start.
func portTaken(err error) bool {
	var ae *apierr.Error
	return errors.As(err, &ae) && ae.Status == http.StatusConflict && strings.Contains(ae.Message, "PORT_IN_USE")
}

// awaitAgent waits, bounded by AgentWait, until the started machine runs a command: an exec
// that lands before the machine's workload is up answers 200 with exitCode 1 and no output
// (smolvm's docs), so the exit code, not the status, says when it is.
func (p *Provider) awaitAgent(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.AgentWait)
	defer cancel()
	wait := 20 * time.Millisecond
	for {
		res, err := p.exec(ctx, name, execRequest{Command: []string{"true"}})
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		if err != nil && !errors.Is(err, agentenv.ErrUnavailable) && apierr.Status(err) < 500 {
			return fmt.Errorf("wait for the machine to run commands: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the machine ran no command within %s (last: exit %d, %v): %w", p.cfg.AgentWait, res.ExitCode, err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// writeLabels writes labels into machine name and reads them back, writing again (bounded by
// AgentWait) while they do not read back: a file uploaded before the workload runs is answered
// 200 and then lost (smolvm's documented trap).
func (p *Provider) writeLabels(ctx context.Context, name string, labels map[string]string) error {
	b, err := json.Marshal(labels)
	if err != nil {
		return fmt.Errorf("labels: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.AgentWait)
	defer cancel()
	for {
		err := p.put(ctx, name, labelsFile, bytes.NewReader(b))
		if err == nil {
			var got []byte
			if got, err = p.get(ctx, name, labelsFile); err == nil && string(got) == string(b) {
				return nil
			} else if err == nil {
				err = fmt.Errorf("read back %d bytes, want %d", len(got), len(b))
			}
		}
		if errors.Is(err, agentenv.ErrUnavailable) || ctx.Err() != nil {
			return fmt.Errorf("write labels: %w", ctxerr.Prefer(ctx, err))
		}
		p.log.Debug("labels did not read back; writing them again", "machine", name, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("write labels: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// info returns GET /machines/{name}; 404 is ErrNotFound.
func (p *Provider) info(ctx context.Context, name string) (machineInfo, error) {
	var mi machineInfo
	if err := p.call(ctx, http.MethodGet, machinePath(name, ""), nil, &mi); err != nil {
		return machineInfo{}, kind(err)
	}
	return mi, nil
}

// facts is what agentenv keeps in a running machine: its labels (nil when the file is not
// there) and, for a bare sandbox whose command ended, the command's exit status.
type facts struct {
	labels map[string]string
	exited bool
	code   int
}

// readFacts reads labelsFile of running machine name and, for a bare sandbox, exitFile.
func (p *Provider) readFacts(ctx context.Context, name string) (facts, error) {
	var f facts
	b, err := p.get(ctx, name, labelsFile)
	if errors.Is(err, agentenv.ErrNotFound) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	if json.Unmarshal(b, &f.labels) != nil || f.labels[agentenv.LabelRecord] != name {
		f.labels = nil
		return f, nil
	}
	if f.labels[labelMode] == modeBare {
		b, err := p.get(ctx, name, exitFile)
		switch {
		case errors.Is(err, agentenv.ErrNotFound):
		case err != nil:
			return f, err
		default:
			code, cerr := strconv.Atoi(strings.TrimSpace(string(b)))
			if cerr != nil {
				code = -1
			}
			f.exited, f.code = true, code
		}
	}
	return f, nil
}

// sandbox converts smolvm's view of a machine and its labels into agentenv's. A bare sandbox's
// ports are its endpoints; a VM's are its stack's slots, not its own.
func (p *Provider) sandbox(mi machineInfo, labels map[string]string, f *facts) agentenv.Sandbox {
	sb := agentenv.Sandbox{ID: mi.Name, Name: mi.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning, Labels: maps.Clone(labels)}
	if mi.CreatedAt > 0 {
		sb.Created = time.Unix(mi.CreatedAt, 0).UTC()
	}
	switch {
	case mi.State == stateCreated:
		sb.State = agentenv.SandboxCreating
	case mi.State != stateRunning:
		sb.State, sb.ExitCode = agentenv.SandboxExited, -1
	case f != nil && f.exited:
		sb.State, sb.ExitCode = agentenv.SandboxExited, f.code
	}
	if labels[labelMode] != modeVM {
		for _, ps := range mi.Ports {
			if sb.Endpoints == nil {
				sb.Endpoints = map[string]string{}
			}
			sb.Endpoints[strconv.Itoa(ps.Guest)] = net.JoinHostPort(p.cfg.PortHost, strconv.Itoa(ps.Host))
		}
	}
	delete(sb.Labels, labelMode)
	return sb
}

// Get returns a live handle to machine id, with its endpoints. A machine smolvm does not list is
// ErrNotFound, and ErrGone too (an unlisted machine counts as gone); a stopped one, or a bare
// sandbox whose command has ended, is ErrGone.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	if !validName(id) {
		return agentenv.Sandbox{}, fmt.Errorf("smol_vm: get %q: no such machine: %w", id, agentenv.ErrNotFound)
	}
	mi, err := p.info(ctx, id)
	if errors.Is(err, agentenv.ErrNotFound) {
		// Not listed: gone, if it ever was (seed 002), and nothing to reattach to.
		return agentenv.Sandbox{}, fmt.Errorf("smol_vm: get %s: %w: %w", id, agentenv.ErrGone, err)
	}
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("smol_vm: get %s: %w", id, err)
	}
	if mi.State != stateRunning {
		sb := p.sandbox(mi, map[string]string{agentenv.LabelRecord: id}, nil)
		if mi.State == stateCreated {
			return sb, nil
		}
		return sb, fmt.Errorf("smol_vm: get %s: machine is %s: %w", id, mi.State, agentenv.ErrGone)
	}
	f, err := p.readFacts(ctx, id)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("smol_vm: get %s: %w", id, err)
	}
	if f.labels == nil {
		f.labels = map[string]string{agentenv.LabelRecord: id}
	}
	sb := p.sandbox(mi, f.labels, &f)
	if f.exited {
		return sb, fmt.Errorf("smol_vm: get %s: its command exited %d: %w", id, f.code, agentenv.ErrGone)
	}
	return sb, nil
}

// Terminate deletes machine id by name (DELETE /machines/{name}, which stops it first), with no
// connect: smolvm's SDK and its exec and files routes start a stopped machine. A machine smolvm
// does not list (404) counts as gone, as does a name smolvm would never have accepted.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("smol_vm: terminate: empty machine name: %w", agentenv.ErrInvalid)
	}
	if !validName(id) {
		return nil
	}
	err := p.call(ctx, http.MethodDelete, machinePath(id, ""), nil, nil)
	if apierr.Status(err) == http.StatusNotFound {
		p.log.Debug("already gone", "machine", id)
		p.forget(id)
		return nil
	}
	if err != nil {
		return fmt.Errorf("smol_vm: terminate %s: %w", id, kind(err))
	}
	p.forget(id)
	p.log.Debug("deleted", "machine", id)
	return nil
}

// listReaders bounds the labels files List reads at once.
const listReaders = 4

// List returns the machines agentenv made (their labels file names them) that carry every one of
// labels. It reads GET /machines, then the labels file of each running machine, filtering here.
// A machine that is not running (made but never started, or stopped) cannot have its file read
// without starting it, so it is listed, with only its record label (its name), to a query by
// record alone (labels[agentenv.LabelRecord]) and to a query for everything (no labels); a
// query by other labels leaves it out. A running machine with no labels file is listed only to a
// query by its record (it is another client's, or one being made).
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	var lr listResponse
	if err := p.call(ctx, http.MethodGet, "/machines", nil, &lr); err != nil {
		return nil, fmt.Errorf("smol_vm: list: %w", kind(err))
	}
	record, byRecord := labels[agentenv.LabelRecord]
	var (
		mu   sync.Mutex
		out  []agentenv.Sandbox
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, listReaders)
	)
	for _, mi := range lr.Machines {
		if !validName(mi.Name) || (byRecord && mi.Name != record) {
			continue
		}
		if mi.State != stateRunning {
			// Its labels cannot be read without starting it: it may be agentenv's, so a query
			// by its record alone, or one for everything agentenv made, gets it with the record
			// label only (gc then collects it if its record is gone; a foreign one has no
			// expiry label and is left alone).
			if (byRecord && len(labels) == 1) || len(labels) == 0 {
				out = append(out, p.sandbox(mi, map[string]string{agentenv.LabelRecord: mi.Name}, nil))
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			f, err := p.readFacts(ctx, mi.Name)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, agentenv.ErrNotFound):
				// Deleted meanwhile.
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", mi.Name, err))
			case f.labels == nil:
				// Not agentenv's, or made a moment ago: found by name alone, as a stopped one.
				if byRecord && len(labels) == 1 {
					out = append(out, p.sandbox(mi, map[string]string{agentenv.LabelRecord: mi.Name}, &f))
				}
			case agentenv.MatchLabels(f.labels, labels):
				out = append(out, p.sandbox(mi, f.labels, &f))
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("smol_vm: list: read labels: %w", errors.Join(errs...))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// exec runs req in machine name and returns its outcome; HTTP 200 with a non-zero exitCode is
// a command that failed, not an error. A machine smolvm does not list is ErrNotFound.
func (p *Provider) exec(ctx context.Context, name string, req execRequest) (agentenv.ExecResult, error) {
	var er execResponse
	if err := p.call(ctx, http.MethodPost, machinePath(name, "/exec"), req, &er); err != nil {
		return agentenv.ExecResult{}, kind(err)
	}
	res := agentenv.ExecResult{ExitCode: er.ExitCode, Stdout: er.StdoutB64, Stderr: er.StderrB64}
	if res.Stdout == nil && er.Stdout != "" {
		res.Stdout = []byte(er.Stdout) // a server before stdoutB64
	}
	if res.Stderr == nil && er.Stderr != "" {
		res.Stderr = []byte(er.Stderr)
	}
	return res, nil
}

// Exec implements agentenv.Execer: argv through POST /machines/{id}/exec. A non-zero exitCode
// (which smolvm answers with HTTP 200) is the result's, not an error.
func (p *Provider) Exec(ctx context.Context, id string, argv []string) (agentenv.ExecResult, error) {
	if !validName(id) || len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("smol_vm: exec in %q: want a machine name and a command: %w", id, agentenv.ErrInvalid)
	}
	res, err := p.exec(ctx, id, execRequest{Command: argv})
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("smol_vm: exec in %s: %w", id, err)
	}
	return res, nil
}

// filePath is the files route of path in machine name.
func filePath(name, path string) string {
	return machinePath(name, "/files/"+strings.TrimPrefix(path, "/"))
}

// maxFile bounds a file read into memory.
const maxFile = 256 << 20

// put uploads what r reads to path in machine name (parents are made, the body streamed) and
// checks that smolvm says it wrote every byte sent.
func (p *Provider) put(ctx context.Context, name, path string, r io.Reader) error {
	cr := &countingReader{r: r}
	resp, err := p.do(ctx, http.MethodPut, filePath(name, path), cr, "application/octet-stream")
	if err != nil {
		return kind(err)
	}
	defer resp.Body.Close()
	var ur uploadResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, cloudapi.MaxAnswer)).Decode(&ur); err != nil {
		return fmt.Errorf("upload %s: decode answer: %w", path, err)
	}
	if ur.Size != cr.n {
		return fmt.Errorf("upload %s: smolvm wrote %d bytes, want %d", path, ur.Size, cr.n)
	}
	return nil
}

// countingReader counts what it reads.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// missingFile matches what smolvm answers (500) for a file that is not there.
var missingFile = regexp.MustCompile(`(?i)no such file|not found`)

// get downloads path from machine name; a file that is not there (404, or smolvm's 500 naming
// it) is ErrNotFound.
func (p *Provider) get(ctx context.Context, name, path string) ([]byte, error) {
	resp, err := p.do(ctx, http.MethodGet, filePath(name, path), nil, "")
	var ae *apierr.Error
	if errors.As(err, &ae) && ae.Status == http.StatusInternalServerError && missingFile.MatchString(ae.Message) {
		return nil, fmt.Errorf("%s: %w: %w", path, agentenv.ErrNotFound, err)
	}
	if err != nil {
		return nil, kind(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxFile+1))
	if err == nil && len(b) > maxFile {
		err = fmt.Errorf("larger than %d bytes", maxFile)
	}
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", path, err)
	}
	return b, nil
}

// WriteFile implements agentenv.Files: PUT /machines/{id}/files/PATH, then read back and
// compared, since smolvm answers 200 for an upload it then loses (its documented trap).
func (p *Provider) WriteFile(ctx context.Context, id, path string, data []byte) error {
	if !validName(id) || !strings.HasPrefix(path, "/") {
		return fmt.Errorf("smol_vm: write %q in %q: want a machine name and an absolute path: %w", path, id, agentenv.ErrInvalid)
	}
	if err := p.put(ctx, id, path, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("smol_vm: write %s in %s: %w", path, id, err)
	}
	got, err := p.get(ctx, id, path)
	if err == nil && string(got) != string(data) {
		err = fmt.Errorf("read back %d bytes that differ from the %d written", len(got), len(data))
	}
	if err != nil {
		return fmt.Errorf("smol_vm: write %s in %s: smolvm answered the upload but the file does not read back: %w", path, id, err)
	}
	return nil
}

// ReadFile implements agentenv.Files: GET /machines/{id}/files/PATH; a missing file is
// ErrNotFound.
func (p *Provider) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	if !validName(id) || !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("smol_vm: read %q in %q: want a machine name and an absolute path: %w", path, id, agentenv.ErrInvalid)
	}
	b, err := p.get(ctx, id, path)
	if err != nil {
		return nil, fmt.Errorf("smol_vm: read %s in %s: %w", path, id, err)
	}
	return b, nil
}

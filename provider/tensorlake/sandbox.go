package tensorlake

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/shellquote"
)

// labelsArg prefixes the entrypoint argument that carries a sandbox's labels (see the package
// doc); labelMode is the label, kept only there, that marks a VM-mode sandbox.
const (
	labelsArg = "agentenv.labels="
	labelMode = "agentenv.tensorlake.mode"
	labelPort = "agentenv.tensorlake.ports"
	modeVM    = "vm"
)

// Sandbox statuses, as Tensorlake reports them.
const (
	statusPending    = "pending"
	statusRunning    = "running"
	statusTerminated = "terminated"
	statusTimeout    = "timeout"
	statusSuspended  = "suspended"
	statusSuspending = "suspending"
)

// createRequest is the body of POST /sandboxes (CreateSandboxRequest).
type createRequest struct {
	Name        string          `json:"name"`
	Image       string          `json:"image,omitempty"`
	Entrypoint  []string        `json:"entrypoint"`
	TimeoutSecs int64           `json:"timeout_secs"`
	Resources   createResources `json:"resources"`
	// ExposedPorts and AllowUnauthenticatedAccess as the update request has them.
	ExposedPorts               []int `json:"exposed_ports,omitempty"`
	AllowUnauthenticatedAccess bool  `json:"allow_unauthenticated_access,omitempty"`
}

type createResources struct {
	CPUs     float64 `json:"cpus"`
	MemoryMB int64   `json:"memory_mb"`
}

// createResponse is CreateSandboxResponse.
type createResponse struct {
	SandboxID string `json:"sandbox_id"`
	Status    string `json:"status"`
	Name      string `json:"name"`
}

// sandboxInfo is SandboxInfo, as GET /sandboxes/{id} and the list answer it.
type sandboxInfo struct {
	ID                string   `json:"id"`
	Status            string   `json:"status"`
	Name              string   `json:"name"`
	Image             string   `json:"image"`
	Entrypoint        []string `json:"entrypoint"`
	TimeoutSecs       int64    `json:"timeout_secs"`
	Outcome           string   `json:"outcome"`
	TerminationReason string   `json:"termination_reason"`
	CreatedAt         int64    `json:"created_at"`
	ExposedPorts      []int    `json:"exposed_ports"`
}

// listResponse is the answer of GET /sandboxes.
type listResponse struct {
	Sandboxes  []sandboxInfo `json:"sandboxes"`
	NextCursor string        `json:"next_cursor"`
}

// labels returns the labels the entrypoint carries, nil if none.
func (si sandboxInfo) labels() map[string]string {
	for _, a := range si.Entrypoint {
		if s, ok := strings.CutPrefix(a, labelsArg); ok {
			var m map[string]string
			if json.Unmarshal([]byte(s), &m) == nil {
				return m
			}
		}
	}
	return nil
}

// entrypoint is wrapper, then the labels as the shell's $0, then command.
func entrypoint(labels map[string]string, wrapper, command []string) ([]string, error) {
	b, err := json.Marshal(labels)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	out := append([]string{}, wrapper...)
	return append(append(out, labelsArg+string(b)), command...), nil
}

// Create makes a sandbox named spec.Name from spec.Image (Config.Image if empty) running
// spec.Command, with the labels in its entrypoint, spec.Ports exposed and the backstop timeout
// always set, and returns once Tensorlake reports it running. The request and the wait run on a
// detached context bounded by CreateTimeout, so Create always learns what Tensorlake made: if
// ctx ends meanwhile, or anything after the request fails, the sandbox is terminated before
// Create returns. A request refused for rate, capacity or credentials is ErrUnavailable; a bad
// spec is ErrInvalid and nothing is created. spec.Env and spec.WorkDir are set by the wrapper
// (Tensorlake's create request has neither): the environment is written into the sandbox once
// it runs, never sent in the create request, and the command starts after it is there; a key of
// spec.Env must be a shell variable name.
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if err := p.check(spec); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tensorlake: create %s: %w", spec.Name, err)
	}
	if len(spec.Command) == 0 {
		return agentenv.Sandbox{}, fmt.Errorf("tensorlake: create %s: want a command (the entrypoint carries the labels, so the image's own is not run): %w", spec.Name, agentenv.ErrInvalid)
	}
	image := cmp.Or(spec.Image, p.cfg.Image)
	if err := cloudapi.CheckImages(image); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tensorlake: create %s: %w", spec.Name, err)
	}
	labels := cloudapi.Labels(spec)
	if len(spec.Ports) > 0 {
		labels[labelPort] = cloudapi.JoinPorts(spec.Ports)
	}
	ep, err := entrypoint(labels, wrapper(len(spec.Env) > 0, spec.WorkDir), spec.Command)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tensorlake: create %s: %w: %w", spec.Name, err, agentenv.ErrInvalid)
	}
	req := createRequest{Name: spec.Name, Image: image, Entrypoint: ep, TimeoutSecs: p.backstop.Seconds(spec),
		Resources: p.resources(spec), ExposedPorts: spec.Ports, AllowUnauthenticatedAccess: len(spec.Ports) > 0}
	si, err := p.create(ctx, spec.Name, req, true)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	if len(spec.Env) > 0 && si.Status == statusRunning {
		err := p.put(ctx, si.ID, envFile, strings.NewReader(string(envScript(spec.Env))))
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			p.rel.Release(ctx, si.ID, spec.Name)
			return agentenv.Sandbox{}, fmt.Errorf("tensorlake: create %s: write its environment: %w", spec.Name, err)
		}
	}
	return p.sandbox(si), nil
}

// envFile is where Create writes a spec's environment in the sandbox, for the wrapper to read.
const envFile = "/tmp/.agentenv-env"

// envWait bounds the wrapper's wait for envFile, in tenths of a second (Create writes it as soon
// as the sandbox runs).
const envWait = 3000

// wrapper is the /bin/sh -c script that runs "$@" in place of the shell (so that the $0 before
// the command, the labels, is dropped), in dir if set. With env it first waits for envFile,
// which Create writes once the sandbox runs, sources it and removes it: the environment (which
// may hold secrets) never travels in the create request, which Tensorlake returns to anyone who
// lists the project's sandboxes.
func wrapper(withEnv bool, dir string) []string {
	var script strings.Builder
	if withEnv {
		f := shellquote.Join([]string{envFile})
		fmt.Fprintf(&script, "i=0; while [ ! -f %s ]; do i=$((i+1)); [ $i -gt %d ] && { echo 'agentenv: no environment file' >&2; exit 97; }; sleep 0.1; done; . %s; rm -f %s; ", f, envWait, f, f)
	}
	if dir != "" {
		script.WriteString("cd " + shellquote.Join([]string{dir}) + " && ")
	}
	script.WriteString(`exec "$@"`)
	return []string{"/bin/sh", "-c", script.String()}
}

// envScript is envFile's content: an export of each variable, in key order.
func envScript(env map[string]string) []byte {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("export " + shellquote.Join([]string{k + "=" + env[k]}) + "\n")
	}
	return []byte(b.String())
}

// resources is the create request's resources for spec, Tensorlake's SDK defaults where unset.
func (p *Provider) resources(spec agentenv.SandboxSpec) createResources {
	r := createResources{CPUs: spec.CPUs, MemoryMB: spec.Memory >> 20}
	if r.CPUs <= 0 {
		r.CPUs = DefaultCPUs
	}
	if r.MemoryMB <= 0 {
		r.MemoryMB = DefaultMemoryMB
	}
	return r
}

// envKey is what an environment variable's name must look like to be exported by the wrapper.
var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// check validates spec before anything is sent.
func (p *Provider) check(spec agentenv.SandboxSpec) error {
	if err := cloudapi.CheckRecord(spec); err != nil {
		return err
	}
	if spec.Network != "" || len(spec.Files) > 0 || len(spec.Aliases) > 0 {
		return fmt.Errorf("networks, aliases and files are not supported here (Tensorlake has no private networks, and a file written after the create would race the command): %w", agentenv.ErrInvalid)
	}
	for k := range spec.Env {
		if !envKey.MatchString(k) {
			return fmt.Errorf("environment variable %q: want a shell variable name: %w", k, agentenv.ErrInvalid)
		}
	}
	for _, port := range spec.Ports {
		if port <= 0 || port > 65535 || port == APIPort {
			return fmt.Errorf("port %d: want 1-65535, not the sandbox API's %d: %w", port, APIPort, agentenv.ErrInvalid)
		}
	}
	return nil
}

// create sends req, waits for the sandbox to run and returns its info; see Create for what it
// guarantees. With exitedOK a sandbox whose entrypoint ended as it started (terminated during
// the wait, once created) is returned as it is, exited, as a container whose command exits at
// once would be; else it is an error.
func (p *Provider) create(ctx context.Context, record string, req createRequest, exitedOK bool) (sandboxInfo, error) {
	cctx, end, err := p.creates.Begin(ctx, record)
	if err != nil {
		return sandboxInfo{}, err
	}
	defer end()
	log := p.log.With("record_id", record, "image", req.Image)
	log.Debug("create sandbox", "timeout_s", req.TimeoutSecs)

	var created createResponse
	err = p.call(cctx, http.MethodPost, p.cfg.APIURL+"/sandboxes", req, &created)
	if err == nil && created.SandboxID == "" {
		err = fmt.Errorf("create answered no sandbox id")
	}
	if err != nil {
		status := apierr.Status(err)
		refused := status >= 400 && status < 500
		if !refused {
			// The answer may be lost though the sandbox exists: find it by name and end it.
			p.rel.Record(ctx, record)
		}
		if status == http.StatusNotFound {
			err = fmt.Errorf("image %q not found: %w: %w", req.Image, agentenv.ErrInvalid, err)
		}
		return sandboxInfo{}, fmt.Errorf("tensorlake: create %s: %w", record, kind(err))
	}
	id := created.SandboxID
	si, err := p.awaitRunning(cctx, id)
	if exitedOK && errors.Is(err, agentenv.ErrGone) && si.ID != "" && ctx.Err() == nil {
		log.Debug("sandbox ended as it started", "sandbox_id", id, "outcome", si.Outcome, "reason", si.TerminationReason)
		return si, nil
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		p.rel.Release(ctx, id, record)
		return sandboxInfo{}, fmt.Errorf("tensorlake: create %s: %w", record, ctxerr.Prefer(ctx, err))
	}
	log.Debug("sandbox created", "sandbox_id", id)
	return si, nil
}

// awaitRunning polls GET /sandboxes/{id} until the sandbox runs, as the SDKs do after a create
// answered "pending"; a sandbox that ends first is an error naming its reason.
func (p *Provider) awaitRunning(ctx context.Context, id string) (sandboxInfo, error) {
	return cloudapi.Await(ctx, "sandbox "+id, func(ctx context.Context) (sandboxInfo, string, bool, error) {
		si, err := p.info(ctx, id)
		switch {
		case err != nil:
			return sandboxInfo{}, "", false, err
		case finished(si.Status):
			return si, si.Status, true, fmt.Errorf("sandbox %s %s during startup (%s %s): %w", id, si.Status, si.Outcome, si.TerminationReason, agentenv.ErrGone)
		}
		return si, si.Status, si.Status == statusRunning, nil
	})
}

// info returns GET /sandboxes/{id}; 404 (SandboxNotFoundError) is ErrNotFound.
func (p *Provider) info(ctx context.Context, id string) (sandboxInfo, error) {
	if id == "" {
		return sandboxInfo{}, fmt.Errorf("empty sandbox id: %w", agentenv.ErrInvalid)
	}
	var si sandboxInfo
	if err := p.call(ctx, http.MethodGet, p.cfg.APIURL+"/sandboxes/"+url.PathEscape(id), nil, &si); err != nil {
		return sandboxInfo{}, kind(err)
	}
	return si, nil
}

// finished reports whether status is one Tensorlake does not come back from.
func finished(status string) bool { return status == statusTerminated || status == statusTimeout }

// sandbox converts Tensorlake's view of a sandbox into agentenv's.
func (p *Provider) sandbox(si sandboxInfo) agentenv.Sandbox {
	labels := si.labels()
	sb := agentenv.Sandbox{ID: si.ID, Name: si.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning, Labels: labels}
	if si.CreatedAt > 0 {
		sb.Created = unixAny(si.CreatedAt)
	}
	if finished(si.Status) || si.Status == statusSuspended || si.Status == statusSuspending {
		sb.State, sb.ExitCode = agentenv.SandboxExited, -1
	}
	sb.Endpoints = cloudapi.Endpoints(labels[labelPort], func(port int) string { return p.cfg.PortURL(si.ID, port) })
	delete(sb.Labels, labelPort)
	delete(sb.Labels, labelMode)
	return sb
}

// unixAny reads a timestamp in seconds, milliseconds or microseconds, as the SDK does.
func unixAny(v int64) time.Time {
	switch {
	case v > 1e15:
		return time.UnixMicro(v).UTC()
	case v > 1e12:
		return time.UnixMilli(v).UTC()
	}
	return time.Unix(v, 0).UTC()
}

// Get returns a live handle to sandbox id, with its endpoints. A terminated (or timed-out)
// sandbox is both ErrGone and ErrNotFound (Tensorlake keeps it only as history, and it cannot
// be reattached), a suspended one ErrGone; one Tensorlake does not know is ErrNotFound.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	si, err := p.info(ctx, id)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tensorlake: get %s: %w", id, err)
	}
	sb := p.sandbox(si)
	switch {
	case finished(si.Status):
		return sb, fmt.Errorf("tensorlake: get %s: %s (%s): %w: %w", id, si.Status, si.TerminationReason, agentenv.ErrGone, agentenv.ErrNotFound)
	case sb.State != agentenv.SandboxRunning:
		return sb, fmt.Errorf("tensorlake: get %s: %s: %w", id, si.Status, agentenv.ErrGone)
	}
	return sb, nil
}

// Terminate ends sandbox id by id (DELETE /sandboxes/{id}), with no connect. Tensorlake makes it
// idempotent for a terminated sandbox; one it does not know (404, SandboxNotFoundError) counts
// as terminated too.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("tensorlake: terminate: empty sandbox id: %w", agentenv.ErrInvalid)
	}
	err := p.call(ctx, http.MethodDelete, p.cfg.APIURL+"/sandboxes/"+url.PathEscape(id), nil, nil)
	if apierr.Status(err) == http.StatusNotFound {
		p.log.Debug("already gone", "sandbox_id", id)
		return nil
	}
	if err != nil {
		return fmt.Errorf("tensorlake: terminate %s: %w", id, kind(err))
	}
	p.forget(id)
	p.log.Debug("terminated", "sandbox_id", id)
	return nil
}

// forget drops what this Provider keeps of sandbox id.
func (p *Provider) forget(id string) { p.vms.Forget(id) }

// List returns the sandboxes not yet terminated that agentenv made (their entrypoint carries an
// agentenv record) and that carry every one of labels. It reads every page of GET /sandboxes and
// filters here; a terminated sandbox costs nothing and is left out. A VM-mode sandbox is listed
// as any other.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	var out []agentenv.Sandbox
	q := url.Values{}
	q.Set("limit", "100")
	err := cloudapi.Pages(func(cursor string) (string, error) {
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page listResponse
		if err := p.call(ctx, http.MethodGet, p.cfg.APIURL+"/sandboxes?"+q.Encode(), nil, &page); err != nil {
			return "", kind(err)
		}
		for _, si := range page.Sandboxes {
			if finished(si.Status) {
				continue
			}
			have := si.labels()
			if rec, ok := have[agentenv.LabelRecord]; !ok || rec != si.Name || !agentenv.MatchLabels(have, labels) {
				continue
			}
			out = append(out, p.sandbox(si))
		}
		if len(page.Sandboxes) == 0 {
			return "", nil
		}
		return page.NextCursor, nil
	})
	if err != nil {
		return nil, fmt.Errorf("tensorlake: list: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

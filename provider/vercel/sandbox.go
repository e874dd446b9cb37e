package vercel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/ctxerr"
)

// Session statuses, as Vercel reports them (a sandbox's status is its current session's).
const (
	statusPending      = "pending"
	statusRunning      = "running"
	statusStopping     = "stopping"
	statusStopped      = "stopped"
	statusFailed       = "failed"
	statusAborted      = "aborted"
	statusSnapshotting = "snapshotting"
)

// over reports whether status is one a session does not come back from.
func over(status string) bool {
	return status == statusStopping || status == statusStopped || status == statusFailed || status == statusAborted
}

// createRequest is the body of POST /v3/sandboxes.
type createRequest struct {
	ProjectID  string            `json:"projectId"`
	Name       string            `json:"name"`
	Image      string            `json:"image,omitempty"`
	Ports      []int             `json:"ports"`
	Timeout    int64             `json:"timeout"`
	Resources  resources         `json:"resources"`
	Persistent bool              `json:"persistent"`
	Tags       map[string]string `json:"tags"`
}

type resources struct {
	VCPUs int `json:"vcpus"`
}

// sandboxInfo is the SDK's Sandbox (validators.ts), the fields this package reads.
type sandboxInfo struct {
	Name             string            `json:"name"`
	Status           string            `json:"status"`
	CurrentSessionID string            `json:"currentSessionId"`
	Tags             map[string]string `json:"tags"`
	CreatedAt        int64             `json:"createdAt"`
	Image            string            `json:"image"`
	Timeout          int64             `json:"timeout"`
}

// sessionInfo is the SDK's Session, the fields this package reads.
type sessionInfo struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// routeInfo is a SandboxRoute: where port Port of the sandbox is reached.
type routeInfo struct {
	URL       string `json:"url"`
	Subdomain string `json:"subdomain"`
	Port      int    `json:"port"`
}

// described is SandboxAndSessionResponse, the answer of a create and of GET /v2/sandboxes/{name}.
type described struct {
	Sandbox sandboxInfo `json:"sandbox"`
	Session sessionInfo `json:"session"`
	Routes  []routeInfo `json:"routes"`
}

// listResponse is SandboxesPaginationResponse.
type listResponse struct {
	Sandboxes  []sandboxInfo `json:"sandboxes"`
	Pagination struct {
		Count int     `json:"count"`
		Next  *string `json:"next"`
	} `json:"pagination"`
}

// commandInfo is the SDK's Command; ExitCode is nil while it runs.
type commandInfo struct {
	ID       string `json:"id"`
	ExitCode *int   `json:"exitCode"`
}

// Create makes a sandbox named spec.Name from spec.Image (Config.Image if empty; Vercel's
// default if both are), with the labels in its tags, spec.Ports routed, the backstop timeout
// always set and persistent false, waits for its session to run, writes spec.Files and starts
// spec.Command (if any) in spec.WorkDir with spec.Env as a detached command whose id it keeps in
// the tags. The request and the waits run on a detached context bounded by CreateTimeout, so
// Create always learns what Vercel made: if ctx ends meanwhile, or anything after the request
// fails, the sandbox is terminated before Create returns. A request refused for rate, capacity or
// credentials is ErrUnavailable; a bad spec is ErrInvalid and nothing is created.
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if err := p.check(spec); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create %s: %w", spec.Name, err)
	}
	image := cmp.Or(spec.Image, p.cfg.Image)
	if err := cloudapi.CheckImages(image); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create %s: %w", spec.Name, err)
	}
	labels := labelsOf(spec)
	if len(spec.Command) > 0 {
		// Reserve the room the command's id takes in the tags, so that the update that adds it
		// cannot be refused for its length once the sandbox runs.
		labels[labelCommand] = "cmd_" + fmt.Sprintf("%032d", 0)
	}
	if _, err := encodeTags(labels); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create %s: %w", spec.Name, err)
	}
	delete(labels, labelCommand)
	tags, _ := encodeTags(labels)
	res, err := p.resources(spec)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create %s: %w", spec.Name, err)
	}
	req := createRequest{ProjectID: p.cfg.ProjectID, Name: spec.Name, Image: image, Ports: spec.Ports,
		Timeout: p.timeout(spec), Resources: res, Tags: tags}
	if req.Ports == nil {
		req.Ports = []int{}
	}
	return p.create(ctx, req, func(ctx context.Context, d described) error {
		return p.start(ctx, d, spec, labels)
	})
}

// start writes spec's files into the sandbox d and starts its command, then records the
// command's id in the tags.
func (p *Provider) start(ctx context.Context, d described, spec agentenv.SandboxSpec, labels map[string]string) error {
	if len(spec.Files) > 0 {
		files := make([]file, 0, len(spec.Files))
		for name, data := range spec.Files {
			mode := int64(0o644)
			if len(data) >= 4 && (string(data[:4]) == "\x7fELF" || string(data[:2]) == "#!") {
				mode = 0o755
			}
			files = append(files, file{name: name, data: data, mode: mode})
		}
		if err := p.writeFiles(ctx, d.Session.ID, files); err != nil {
			return fmt.Errorf("write its files: %w", err)
		}
	}
	if len(spec.Command) == 0 {
		return nil
	}
	cmd, err := p.startCommand(ctx, d.Session.ID, commandRequest{Command: spec.Command[0], Args: spec.Command[1:],
		Cwd: spec.WorkDir, Env: spec.Env})
	if err != nil {
		return fmt.Errorf("start its command: %w", err)
	}
	labels = maps.Clone(labels)
	labels[labelCommand] = cmd.ID
	tags, err := encodeTags(labels)
	if err == nil {
		err = p.call(ctx, http.MethodPatch, "/v2/sandboxes/"+url.PathEscape(d.Sandbox.Name), p.projectQuery(), map[string]any{"tags": tags}, nil)
	}
	if err != nil {
		return fmt.Errorf("tag its command %s: %w", cmd.ID, kind(err))
	}
	return nil
}

// projectQuery is the projectId query of the sandbox routes.
func (p *Provider) projectQuery() url.Values { return url.Values{"projectId": {p.cfg.ProjectID}} }

// labelsOf returns spec's labels (package lifecycle sets the expiry among them), a fresh map.
func labelsOf(spec agentenv.SandboxSpec) map[string]string {
	labels := map[string]string{}
	maps.Copy(labels, spec.Labels)
	return labels
}

// resources is the vCPUs that give spec its CPUs and memory (Vercel gives 2048 MB per vCPU): 1,
// or an even count up to 32.
func (p *Provider) resources(spec agentenv.SandboxSpec) (resources, error) {
	n := max(1, int(math.Ceil(spec.CPUs)), int((spec.Memory+memoryPerVCPU-1)/memoryPerVCPU))
	if n > 1 && n%2 == 1 {
		n++
	}
	if n > maxVCPUs {
		return resources{}, fmt.Errorf("%g CPUs and %d MiB need %d vCPUs, more than Vercel's %d: %w", spec.CPUs, spec.Memory>>20, n, maxVCPUs, agentenv.ErrInvalid)
	}
	return resources{VCPUs: n}, nil
}

// check validates spec before anything is sent.
func (p *Provider) check(spec agentenv.SandboxSpec) error {
	if err := cloudapi.CheckRecord(spec); err != nil {
		return err
	}
	if spec.Network != "" || len(spec.Aliases) > 0 {
		return fmt.Errorf("networks and aliases are not supported (Vercel has no private network between sandboxes): %w", agentenv.ErrInvalid)
	}
	if len(spec.Ports) > MaxPorts {
		return fmt.Errorf("%d ports: a Vercel sandbox exposes at most %d: %w", len(spec.Ports), MaxPorts, agentenv.ErrInvalid)
	}
	for _, port := range spec.Ports {
		if port < 1024 || port > 65535 {
			return fmt.Errorf("port %d: Vercel routes ports 1024-65535: %w", port, agentenv.ErrInvalid)
		}
	}
	for name := range spec.Files {
		if len(name) == 0 || name[0] != '/' {
			return fmt.Errorf("file %q: want an absolute path: %w", name, agentenv.ErrInvalid)
		}
	}
	return nil
}

// create sends req, waits for the sandbox's session to run, runs then (if not nil) on it and
// returns the sandbox; see Create for what it guarantees.
func (p *Provider) create(ctx context.Context, req createRequest, then func(context.Context, described) error) (agentenv.Sandbox, error) {
	record := req.Name
	cctx, end, err := p.creates.Begin(ctx, record)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	defer end()
	log := p.log.With("record_id", record, "image", req.Image)
	log.Debug("create sandbox", "timeout_ms", req.Timeout, "vcpus", req.Resources.VCPUs)

	var d described
	err = p.call(cctx, http.MethodPost, "/v3/sandboxes", nil, req, &d)
	if err == nil && d.Sandbox.Name != record {
		err = fmt.Errorf("create answered sandbox %q, want %q", d.Sandbox.Name, record)
	}
	if err != nil {
		switch status := apierr.Status(err); {
		case status == http.StatusConflict:
			// The name is held: not this create's to terminate.
		case status == http.StatusUnauthorized, status == http.StatusForbidden, status == http.StatusTooManyRequests:
			// Refused for credentials or rate: nothing made, and a chain moves on.
		case status >= 400 && status < 500:
			// Refused: nothing made.
			if err = kind(err); !errors.Is(err, agentenv.ErrInvalid) {
				err = fmt.Errorf("%w: %w", agentenv.ErrInvalid, err)
			}
			return agentenv.Sandbox{}, fmt.Errorf("vercel: create %s: %w", record, err)
		default:
			// The answer may be lost though the sandbox exists: terminate it by name.
			p.release(ctx, record)
		}
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create %s: %w", record, kind(err))
	}
	if d.Session.Status != statusRunning {
		d, err = p.awaitRunning(cctx, record)
	}
	if err == nil && then != nil {
		err = then(cctx, d)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		p.release(ctx, record)
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create %s: %w", record, ctxerr.Prefer(ctx, err))
	}
	log.Debug("sandbox created", "session_id", d.Session.ID)
	d, err = p.describe(cctx, record)
	if err != nil {
		p.release(ctx, record)
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create %s: %w", record, ctxerr.Prefer(ctx, err))
	}
	return p.sandbox(ctx, d), nil
}

// release terminates the sandbox record (its name) after a create that will not be used.
func (p *Provider) release(ctx context.Context, record string) { p.rel.Release(ctx, record, record) }

// awaitRunning polls GET /v2/sandboxes/{name} until the sandbox's session runs; a session that
// ends first is an error naming its status.
func (p *Provider) awaitRunning(ctx context.Context, name string) (described, error) {
	return cloudapi.Await(ctx, "sandbox "+name, func(ctx context.Context) (described, string, bool, error) {
		d, err := p.describe(ctx, name)
		switch {
		case err != nil:
			return described{}, "", false, err
		case over(d.Session.Status):
			return d, d.Session.Status, true, fmt.Errorf("sandbox %s %s during startup: %w", name, d.Session.Status, agentenv.ErrGone)
		}
		return d, d.Session.Status, d.Session.Status == statusRunning, nil
	})
}

// describe returns GET /v2/sandboxes/{name} (never resuming a stopped sandbox); 404 is
// ErrNotFound.
func (p *Provider) describe(ctx context.Context, name string) (described, error) {
	if name == "" {
		return described{}, fmt.Errorf("empty sandbox name: %w", agentenv.ErrInvalid)
	}
	q := p.projectQuery()
	q.Set("resume", "false")
	var d described
	if err := p.call(ctx, http.MethodGet, "/v2/sandboxes/"+url.PathEscape(name), q, nil, &d); err != nil {
		return described{}, kind(err)
	}
	if d.Session.Status == "" {
		d.Session.Status = d.Sandbox.Status
	}
	if d.Session.ID == "" {
		d.Session.ID = d.Sandbox.CurrentSessionID
	}
	return d, nil
}

// sandbox converts Vercel's view of a sandbox into agentenv's. A running sandbox whose command
// has exited is exited with the command's code (asked of the API); a stopped one exited with -1.
func (p *Provider) sandbox(ctx context.Context, d described) agentenv.Sandbox {
	labels, own, _ := decodeTags(d.Sandbox.Name, d.Sandbox.Tags)
	sb := agentenv.Sandbox{ID: d.Sandbox.Name, Name: d.Sandbox.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning, Labels: labels}
	if d.Sandbox.CreatedAt > 0 {
		sb.Created = time.UnixMilli(d.Sandbox.CreatedAt).UTC()
	}
	switch st := d.Session.Status; {
	case st == statusPending:
		sb.State = agentenv.SandboxCreating
	case over(st):
		sb.State, sb.ExitCode = agentenv.SandboxExited, -1
	case own[labelCommand] != "":
		var c struct {
			Command commandInfo `json:"command"`
		}
		err := p.call(ctx, http.MethodGet, "/v2/sandboxes/sessions/"+url.PathEscape(d.Session.ID)+"/cmd/"+url.PathEscape(own[labelCommand]), nil, nil, &c)
		if apierr.Status(err) == http.StatusGone {
			sb.State, sb.ExitCode = agentenv.SandboxExited, -1
		} else if err == nil && c.Command.ExitCode != nil {
			sb.State, sb.ExitCode = agentenv.SandboxExited, *c.Command.ExitCode
		}
	}
	if sb.State != agentenv.SandboxExited {
		for _, r := range d.Routes {
			if sb.Endpoints == nil {
				sb.Endpoints = map[string]string{}
			}
			sb.Endpoints[strconv.Itoa(r.Port)] = r.URL
		}
	}
	return sb
}

// Get returns a live handle to sandbox name, with its endpoints (its routes). One whose session
// has stopped, or whose command has exited, is ErrGone; one Vercel does not hold is ErrNotFound
// and ErrGone (Vercel answers 404 for a deleted sandbox and one never made alike).
func (p *Provider) Get(ctx context.Context, name string) (agentenv.Sandbox, error) {
	d, err := p.describe(ctx, name)
	if errors.Is(err, agentenv.ErrNotFound) {
		return agentenv.Sandbox{}, fmt.Errorf("vercel: get %s: not held by Vercel (deleted, or never made): %w: %w", name, err, agentenv.ErrGone)
	}
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("vercel: get %s: %w", name, err)
	}
	sb := p.sandbox(ctx, d)
	if sb.State == agentenv.SandboxExited {
		return sb, fmt.Errorf("vercel: get %s: %s (exit %d): %w", name, d.Session.Status, sb.ExitCode, agentenv.ErrGone)
	}
	return sb, nil
}

// Terminate ends sandbox name by name: it stops the sandbox's session (POST
// /v2/sandboxes/sessions/{id}/stop) unless it has stopped, then deletes the sandbox (DELETE
// /v2/sandboxes/{name}, waiting out a session still stopping). A sandbox Vercel does not know
// (404) counts as terminated.
func (p *Provider) Terminate(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("vercel: terminate: empty sandbox name: %w", agentenv.ErrInvalid)
	}
	d, err := p.describe(ctx, name)
	if errors.Is(err, agentenv.ErrNotFound) {
		p.log.Debug("already gone", "sandbox_id", name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("vercel: terminate %s: %w", name, err)
	}
	if !over(d.Session.Status) && d.Session.ID != "" {
		err := p.call(ctx, http.MethodPost, "/v2/sandboxes/sessions/"+url.PathEscape(d.Session.ID)+"/stop", nil, nil, nil)
		if status := apierr.Status(err); err != nil && status != http.StatusNotFound && status != http.StatusGone {
			return fmt.Errorf("vercel: terminate %s: stop session %s: %w", name, d.Session.ID, kind(err))
		}
	}
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		q := p.projectQuery()
		q.Set("deleteOrphanSnapshots", "true")
		err := p.call(ctx, http.MethodDelete, "/v2/sandboxes/"+url.PathEscape(name), q, nil, nil)
		switch apierr.Status(err) {
		case http.StatusNotFound:
			err = nil
		case http.StatusUnprocessableEntity: // sandbox_stopping: its session is still stopping
			p.log.Debug("delete waits for the session to stop", "sandbox_id", name, "err", err)
		default:
			if err != nil {
				return fmt.Errorf("vercel: terminate %s: delete: %w", name, kind(err))
			}
		}
		if err == nil {
			p.forget(name)
			p.log.Debug("terminated", "sandbox_id", name)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vercel: terminate %s: waiting for its session to stop: %w", name, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// describeConcurrency bounds the sandboxes List describes at once.
const describeConcurrency = 8

// List returns the sandboxes agentenv made (their tags carry agentenv.labels) that carry every
// one of labels, deleted ones aside. By record it gets the one sandbox of that name; otherwise it
// reads every page of GET /v2/sandboxes, filtered by Vercel on the deployment's (else the run's)
// tag and here on the rest, and describes each sandbox still running (its routes, its command's
// exit) as Get does.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	var infos []sandboxInfo
	if record, ok := labels[agentenv.LabelRecord]; ok {
		if !cloudapi.RecordName.MatchString(record) {
			return nil, nil
		}
		d, err := p.describe(ctx, record)
		if errors.Is(err, agentenv.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("vercel: list: %w", err)
		}
		infos = []sandboxInfo{d.Sandbox}
	} else {
		var err error
		if infos, err = p.listAll(ctx, labels); err != nil {
			return nil, err
		}
	}
	var matched []sandboxInfo
	for _, si := range infos {
		if have, _, ok := decodeTags(si.Name, si.Tags); ok && agentenv.MatchLabels(have, labels) {
			matched = append(matched, si)
		}
	}
	out := make([]agentenv.Sandbox, len(matched))
	errs := make([]error, len(matched))
	var wg sync.WaitGroup
	sem := make(chan struct{}, describeConcurrency)
	for i, si := range matched {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			d := described{Sandbox: si, Session: sessionInfo{ID: si.CurrentSessionID, Status: si.Status}}
			if !over(si.Status) {
				var err error
				if d, err = p.describe(ctx, si.Name); errors.Is(err, agentenv.ErrNotFound) {
					return // deleted meanwhile
				} else if err != nil {
					errs[i] = err
					return
				}
			}
			out[i] = p.sandbox(ctx, d)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("vercel: list: %w", err)
	}
	var res []agentenv.Sandbox
	for _, sb := range out {
		if sb.ID != "" {
			res = append(res, sb)
		}
	}
	sort.Slice(res, func(i, j int) bool { return res[i].ID < res[j].ID })
	return res, nil
}

// listAll reads every page of GET /v2/sandboxes, filtered by the deployment's tag, else the
// run's, when labels name one.
func (p *Provider) listAll(ctx context.Context, labels map[string]string) ([]sandboxInfo, error) {
	q := url.Values{"project": {p.cfg.ProjectID}, "limit": {"100"}}
	for _, k := range []string{agentenv.LabelDeployment, agentenv.LabelRun} {
		if v := labels[k]; v != "" {
			q.Set("tags", k+":"+v)
			break
		}
	}
	var out []sandboxInfo
	err := cloudapi.Pages(func(cursor string) (string, error) {
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page listResponse
		if err := p.call(ctx, http.MethodGet, "/v2/sandboxes", q, nil, &page); err != nil {
			return "", kind(err)
		}
		out = append(out, page.Sandboxes...)
		if page.Pagination.Next == nil || len(page.Sandboxes) == 0 {
			return "", nil
		}
		return *page.Pagination.Next, nil
	})
	if err != nil {
		return nil, fmt.Errorf("vercel: list: %w", err)
	}
	return out, nil
}

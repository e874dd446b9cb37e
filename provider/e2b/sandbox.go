package e2b

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/ctxerr"
)

// labelPorts is the metadata key under which Create keeps the spec's ports, so that Get and List
// can name the endpoints of a sandbox they did not create. It is not a user label.
const labelPorts = "agentenv.e2b.ports"

// mainTag is the envd tag of the process Create starts as the sandbox's workload.
const mainTag = "agentenv-main"

// newSandbox is the body of POST /sandboxes (schema NewSandbox).
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    int               `json:"timeout"`
	AutoPause  bool              `json:"autoPause"`
	Secure     bool              `json:"secure"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars,omitempty"`
}

// createdSandbox is the answer to POST /sandboxes (schema Sandbox).
type createdSandbox struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
}

// listedSandbox is one item of GET /v2/sandboxes and the answer to GET /sandboxes/{id}
// (schemas ListedSandbox and SandboxDetail).
type listedSandbox struct {
	TemplateID      string            `json:"templateID"`
	SandboxID       string            `json:"sandboxID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"` // running or paused
	EnvdAccessToken string            `json:"envdAccessToken"`
}

// Create makes a sandbox from the template spec.Image names (Config.Template if empty), with
// every label of spec as metadata and the backstop timeout always set, then starts
// spec.Command in it through the process API, in the background. The create request runs on a
// detached context bounded by CreateTimeout, so Create always learns what E2B made: if ctx ends
// meanwhile, or anything after the request fails, the sandbox is killed before Create returns.
// A request refused for rate or capacity (429, 502-504) or credentials is ErrUnavailable; an
// unknown template or a bad spec is ErrInvalid, and nothing is created.
//
// E2B keeps a sandbox running after its workload exits, until its timeout; Get reports ErrGone
// only once E2B has ended the sandbox.
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	template := spec.Image
	if template == "" {
		template = p.cfg.Template
	}
	if err := p.check(spec, template); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: create %s: %w", spec.Name, err)
	}
	return p.create(ctx, spec, template, spec.Command)
}

// check validates spec before anything is sent.
func (p *Provider) check(spec agentenv.SandboxSpec, template string) error {
	if err := cloudapi.CheckRecord(spec); err != nil {
		return err
	}
	if !templateName.MatchString(template) {
		return fmt.Errorf("template %q: want a template id or alias: %w", template, agentenv.ErrInvalid)
	}
	if spec.Network != "" || len(spec.Files) > 0 || len(spec.Aliases) > 0 {
		return fmt.Errorf("networks, aliases and files are not supported here: %w", agentenv.ErrInvalid)
	}
	for _, port := range spec.Ports {
		if port <= 0 || port > 65535 || port == EnvdPort {
			return fmt.Errorf("port %d: want 1-65535, not envd's %d: %w", port, EnvdPort, agentenv.ErrInvalid)
		}
	}
	return nil
}

func (p *Provider) create(ctx context.Context, spec agentenv.SandboxSpec, template string, command []string) (agentenv.Sandbox, error) {
	cctx, end, err := p.creates.Begin(ctx, spec.Name)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	defer end()
	meta := cloudapi.Labels(spec)
	if len(spec.Ports) > 0 {
		meta[labelPorts] = cloudapi.JoinPorts(spec.Ports)
	}
	body := newSandbox{TemplateID: template, Timeout: int(p.backstop.Seconds(spec)), Secure: true, Metadata: meta, EnvVars: spec.Env}
	log := p.log.With("record_id", spec.Name, "template", template)
	log.Debug("create sandbox", "timeout_s", body.Timeout)

	var created createdSandbox
	_, err = p.call(cctx, http.MethodPost, "/sandboxes", body, &created)
	if err != nil {
		status := apierr.Status(err)
		refused := status >= 400 && status < 500
		if !refused {
			// The response may be lost though the sandbox exists: find it by metadata and end it.
			p.rel.Record(ctx, spec.Name)
		}
		if status == http.StatusNotFound {
			err = fmt.Errorf("template %q not found: %w: %w", template, agentenv.ErrInvalid, err)
		}
		return agentenv.Sandbox{}, fmt.Errorf("e2b: create %s: %w", spec.Name, kind(err))
	}
	id := created.SandboxID
	if err := ctx.Err(); err != nil {
		p.rel.Release(ctx, id, spec.Name)
		return agentenv.Sandbox{}, fmt.Errorf("e2b: create %s: %w", spec.Name, err)
	}
	out := p.sandbox(listedSandbox{SandboxID: id, Metadata: meta, State: "running", StartedAt: time.Now()})
	if len(command) > 0 {
		_, err := p.process(ctx, id, created.EnvdAccessToken, processConfig{Cmd: command[0], Args: command[1:], Envs: spec.Env, Cwd: spec.WorkDir}, "user", mainTag, false)
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			p.rel.Release(ctx, id, spec.Name)
			return agentenv.Sandbox{}, fmt.Errorf("e2b: create %s: start %s: %w", spec.Name, command[0], ctxerr.Prefer(ctx, err))
		}
	}
	log.Debug("sandbox created", "sandbox_id", id)
	return out, nil
}

// sandbox converts E2B's view of a sandbox into agentenv's.
func (p *Provider) sandbox(ls listedSandbox) agentenv.Sandbox {
	sb := agentenv.Sandbox{
		ID: ls.SandboxID, Name: ls.Metadata[agentenv.LabelRecord], Provider: p.cfg.Name,
		State: agentenv.SandboxRunning, Labels: maps.Clone(ls.Metadata), Created: ls.StartedAt,
		Endpoints: cloudapi.Endpoints(ls.Metadata[labelPorts], func(port int) string { return p.cfg.SandboxURL(ls.SandboxID, port) }),
	}
	if ls.State == "paused" {
		sb.State, sb.ExitCode = agentenv.SandboxExited, -1
	}
	return sb
}

// detail returns GET /sandboxes/{id}; a sandbox E2B does not know (killed, timed out, never
// made) is both ErrNotFound and ErrGone.
func (p *Provider) detail(ctx context.Context, id string) (listedSandbox, error) {
	if id == "" {
		return listedSandbox{}, fmt.Errorf("empty sandbox id: %w", agentenv.ErrInvalid)
	}
	var d listedSandbox
	_, err := p.call(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, &d)
	if apierr.Status(err) == http.StatusNotFound {
		return listedSandbox{}, fmt.Errorf("not running on E2B (killed, timed out or unknown): %w: %w", agentenv.ErrNotFound, agentenv.ErrGone)
	}
	if err != nil {
		return listedSandbox{}, kind(err)
	}
	return d, nil
}

// Get returns a live handle to sandbox id, with its endpoints. A sandbox E2B no longer runs is
// ErrNotFound and ErrGone (E2B answers 404 for killed, timed-out and unknown sandboxes alike);
// a paused one is ErrGone.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	d, err := p.detail(ctx, id)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: get %s: %w", id, err)
	}
	sb := p.sandbox(d)
	if sb.State != agentenv.SandboxRunning {
		return sb, fmt.Errorf("e2b: get %s: %s: %w", id, d.State, agentenv.ErrGone)
	}
	return sb, nil
}

// Terminate kills sandbox id by id (DELETE /sandboxes/{id}), with no connect. A sandbox E2B
// does not know (404: already killed, timed out, never made) counts as gone, as the SDKs'
// kill() returning false does.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("e2b: terminate: empty sandbox id: %w", agentenv.ErrInvalid)
	}
	_, err := p.call(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil)
	if apierr.Status(err) == http.StatusNotFound {
		p.log.Debug("already gone", "sandbox_id", id)
		return nil
	}
	if err != nil {
		return fmt.Errorf("e2b: terminate %s: %w", id, kind(err))
	}
	p.log.Debug("killed", "sandbox_id", id)
	return nil
}

// List returns the running and paused sandboxes that carry every one of labels as metadata and
// an agentenv record (E2B does not list ended sandboxes; they cost nothing). It reads every page
// of GET /v2/sandboxes, asks E2B to filter by the non-empty labels, and filters again here, so
// a server that ignores the filter still gives the right answer.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	filter := url.Values{}
	for k, v := range labels {
		if v != "" {
			filter.Set(k, v)
		}
	}
	q := url.Values{}
	q.Set("state", "running,paused")
	q.Set("limit", "100")
	if len(filter) > 0 {
		q.Set("metadata", filter.Encode())
	}
	var out []agentenv.Sandbox
	err := cloudapi.Pages(func(token string) (string, error) {
		if token != "" {
			q.Set("nextToken", token)
		}
		var page []listedSandbox
		h, err := p.call(ctx, http.MethodGet, "/v2/sandboxes?"+q.Encode(), nil, &page)
		if err != nil {
			return "", kind(err)
		}
		for _, ls := range page {
			if _, ok := ls.Metadata[agentenv.LabelRecord]; !ok || !agentenv.MatchLabels(ls.Metadata, labels) {
				continue
			}
			out = append(out, p.sandbox(ls))
		}
		if len(page) == 0 {
			return "", nil
		}
		return h.Get("X-Next-Token"), nil
	})
	if err != nil {
		return nil, fmt.Errorf("e2b: list: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

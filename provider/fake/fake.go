// Package fake is an in-memory agentenv.Provider for unit tests. It is a stand-in for a real
// backend, not a mock: it assigns ids, honours labels, keeps exited sandboxes until they are
// terminated, and reports what is still alive, so that tests can assert nothing leaked. Faults
// (errors, hangs, lost responses) are injected by wrapping it with package internal/fault.
package fake

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
)

// Provider is an in-memory provider. The zero value is not usable; call New.
type Provider struct {
	name string
	caps agentenv.Capabilities

	mu    sync.Mutex
	boxes map[string]*agentenv.Sandbox // by id
	seq   int
	calls map[string]int
}

var (
	_ agentenv.Provider  = (*Provider)(nil)
	_ agentenv.Networker = (*Provider)(nil)
	_ agentenv.Execer    = (*Provider)(nil)
)

// New returns an empty fake provider called name.
func New(name string) *Provider {
	return &Provider{
		name: name,
		caps: agentenv.Capabilities{
			ContainerMode: true, VMMode: true, PrivateNetworks: true, ListByLabel: true,
		},
		boxes: make(map[string]*agentenv.Sandbox),
		calls: make(map[string]int),
	}
}

// Name implements agentenv.Provider.
func (p *Provider) Name() string { return p.name }

// Capabilities implements agentenv.Provider.
func (p *Provider) Capabilities() agentenv.Capabilities { return p.caps }

// Create implements agentenv.Provider. It fails with ErrInvalid for an image named "missing" and
// for a spec whose record label does not match its name.
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	p.count("create")
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create %s: %w", spec.Name, err)
	}
	if spec.Name == "" || spec.Labels[agentenv.LabelRecord] != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create %q: record label must equal the name: %w", spec.Name, agentenv.ErrInvalid)
	}
	if spec.Image == "missing" {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create %s: image %q not found: %w", spec.Name, spec.Image, agentenv.ErrInvalid)
	}
	return p.add(spec.Name, spec.Labels, spec.Ports), nil
}

// CreateNetwork implements agentenv.Networker.
func (p *Provider) CreateNetwork(ctx context.Context, spec agentenv.NetworkSpec) (agentenv.Sandbox, error) {
	p.count("create_network")
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create network %s: %w", spec.Name, err)
	}
	return p.add(spec.Name, spec.Labels, nil), nil
}

func (p *Provider) add(name string, labels map[string]string, ports []int) agentenv.Sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	sb := &agentenv.Sandbox{
		ID:        fmt.Sprintf("%s-%d", p.name, p.seq),
		Name:      name,
		Provider:  p.name,
		State:     agentenv.SandboxRunning,
		Labels:    maps.Clone(labels),
		Endpoints: map[string]string{},
		Created:   time.Now(),
	}
	for i, port := range ports {
		sb.Endpoints[fmt.Sprint(port)] = fmt.Sprintf("127.0.0.1:%d", 40000+p.seq*10+i)
	}
	p.boxes[sb.ID] = sb
	return *sb
}

// Get implements agentenv.Provider.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	p.count("get")
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, ok := p.boxes[id]
	if !ok {
		return agentenv.Sandbox{}, fmt.Errorf("fake: get %s: %w", id, agentenv.ErrNotFound)
	}
	if sb.State != agentenv.SandboxRunning {
		return agentenv.Sandbox{}, fmt.Errorf("fake: get %s: %w", id, agentenv.ErrGone)
	}
	return *sb, nil
}

// Terminate implements agentenv.Provider.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	p.count("terminate")
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fake: terminate %s: %w", id, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.boxes, id)
	return nil
}

// List implements agentenv.Provider.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	p.count("list")
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: list: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []agentenv.Sandbox
	for _, sb := range p.boxes {
		if matches(sb.Labels, labels) {
			out = append(out, *sb)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Exec implements agentenv.Execer: it echoes argv joined by spaces and exits 0.
func (p *Provider) Exec(ctx context.Context, id string, argv []string) (agentenv.ExecResult, error) {
	if _, err := p.Get(ctx, id); err != nil {
		return agentenv.ExecResult{}, err
	}
	return agentenv.ExecResult{Stdout: fmt.Appendf(nil, "%v", argv)}, nil
}

// Kill marks the sandbox id as exited with code, as if it died behind agentenv's back.
func (p *Provider) Kill(id string, code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sb, ok := p.boxes[id]; ok {
		sb.State = agentenv.SandboxExited
		sb.ExitCode = code
	}
}

// Remove deletes the sandbox id, as if someone removed it behind agentenv's back.
func (p *Provider) Remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.boxes, id)
}

// Live returns the ids of the sandboxes that still exist (running or exited), sorted.
func (p *Provider) Live() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.boxes))
	for id := range p.boxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Calls returns how many times op ("create", "terminate", "list", ...) was called.
func (p *Provider) Calls(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[op]
}

func (p *Provider) count(op string) {
	p.mu.Lock()
	p.calls[op]++
	p.mu.Unlock()
}

func matches(have, want map[string]string) bool {
	if _, ok := have[agentenv.LabelRecord]; !ok {
		return false
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

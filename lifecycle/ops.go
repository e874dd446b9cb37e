package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// target returns the backend and the record of a live sandbox, by record id.
func (m *Manager) target(ctx context.Context, id string) (*backend, agentenv.Record, error) {
	r, err := m.cfg.Ledger.Get(ctx, id)
	if err != nil {
		return nil, agentenv.Record{}, fmt.Errorf("record %s: %w", id, err)
	}
	if r.SandboxID == "" {
		return nil, r, fmt.Errorf("record %s is %s, with no sandbox: %w", id, r.State, agentenv.ErrNotFound)
	}
	b, err := m.backend(r.Provider)
	if err != nil {
		return nil, r, err
	}
	return b, r, nil
}

// lacks is the error for a provider without the ability an operation needs.
func lacks(b *backend, what string) error {
	return fmt.Errorf("provider %s cannot %s: %w", b.p.Name(), what, agentenv.ErrInvalid)
}

// Get asks the provider of record id whether its sandbox runs, for health and reattach. It is
// an error wrapping ErrGone if the sandbox finished and ErrNotFound if it is not there.
//
// For a container added to a VM (an in_vm record), it reports on the VM that holds it: a VM
// host does not report on one container of its stack, and the container is gone once the VM
// is.
func (m *Manager) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	b, r, err := m.target(ctx, id)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	if r.Kind == agentenv.KindInVM {
		vm, err := m.Get(ctx, r.Attrs[agentenv.AttrVM])
		if err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("%s: its vm: %w", id, err)
		}
		return agentenv.Sandbox{ID: r.SandboxID, Name: r.ID, Provider: vm.Provider, State: vm.State, ExitCode: vm.ExitCode, Labels: r.Labels, Created: r.Created}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	return b.p.Get(cctx, r.SandboxID)
}

// Exec runs argv in the sandbox of record id and waits for it to exit, for at most the exec
// timeout. A non-zero exit is in the result, not an error.
func (m *Manager) Exec(ctx context.Context, id string, argv []string) (agentenv.ExecResult, error) {
	b, r, err := m.target(ctx, id)
	if err != nil {
		return agentenv.ExecResult{}, err
	}
	if b.a.Execer == nil {
		return agentenv.ExecResult{}, lacks(b, "run commands in a sandbox")
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.ExecTimeout)
	defer cancel()
	return b.a.Execer.Exec(cctx, r.SandboxID, argv)
}

// Attach starts argv in the sandbox of record id with its standard input and output attached,
// the start bounded by the exec timeout. The stream outlives ctx: the caller closes it, and a
// process it leaves behind goes with its sandbox.
func (m *Manager) Attach(ctx context.Context, id string, argv []string) (agentenv.Stream, error) {
	b, r, err := m.target(ctx, id)
	if err != nil {
		return nil, err
	}
	if b.a.Attacher == nil {
		return nil, lacks(b, "attach to a process in a sandbox")
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.ExecTimeout)
	defer cancel()
	return b.a.Attacher.Attach(cctx, r.SandboxID, argv)
}

// WriteFile writes data to path in the sandbox of record id.
func (m *Manager) WriteFile(ctx context.Context, id, path string, data []byte) error {
	b, r, err := m.target(ctx, id)
	if err != nil {
		return err
	}
	if b.a.Files == nil {
		return lacks(b, "write files in a sandbox")
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	return b.a.Files.WriteFile(cctx, r.SandboxID, path, data)
}

// ReadFile returns the contents of path in the sandbox of record id; ErrNotFound if there is
// no such file.
func (m *Manager) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	b, r, err := m.target(ctx, id)
	if err != nil {
		return nil, err
	}
	if b.a.Files == nil {
		return nil, lacks(b, "read files in a sandbox")
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	return b.a.Files.ReadFile(cctx, r.SandboxID, path)
}

// Logs returns the last tail lines the sandbox of record id printed, or "" from a provider
// that keeps no output. It runs on a cleanup context, since it is read to explain a failure
// that may have cancelled ctx.
func (m *Manager) Logs(ctx context.Context, id string, tail int) (string, error) {
	cctx, cancel := cleanup.Context(ctx, m.cfg.CallTimeout)
	defer cancel()
	b, r, err := m.target(cctx, id)
	if err != nil {
		return "", err
	}
	if b.a.LogReader == nil {
		return "", nil
	}
	return b.a.LogReader.Logs(cctx, r.SandboxID, tail)
}

// EnsureImages makes each image available to the provider called name, or returns an error
// wrapping ErrInvalid naming the first it cannot run. A provider that runs images from a store
// it cannot check (it has no agentenv.ImageChecker) accepts them all here.
func (m *Manager) EnsureImages(ctx context.Context, name string, images ...string) error {
	b, err := m.backend(name)
	if err != nil {
		return err
	}
	if b.a.ImageChecker == nil {
		return nil
	}
	for _, image := range images {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CreateTimeout)
		err := b.a.ImageChecker.EnsureImage(cctx, image)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// RunInVM starts spec as the container spec.Name of the stack of the VM with record id vm, by
// the VM host's rules (what it makes carries the VM's labels and goes with the VM). Like Create,
// the start runs on a detached, bounded context: if ctx ends first, it may still finish for up
// to the reclaim wait, and what it made is then removed from the VM; past that, it goes with
// the VM's teardown or gc, by the VM's label.
func (m *Manager) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	b, r, err := m.target(ctx, vm)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	if b.a.VMHost == nil {
		return agentenv.Sandbox{}, lacks(b, "host a VM stack")
	}
	type result struct {
		sb  agentenv.Sandbox
		err error
	}
	ch := make(chan result, 1)
	m.calls.Add(1)
	go func() {
		defer m.calls.Done()
		cctx, cancel := cleanup.Detached(ctx, m.cfg.CreateTimeout)
		defer cancel()
		sb, err := b.a.VMHost.RunInVM(cctx, r.SandboxID, spec)
		ch <- result{sb, err}
	}()
	select {
	case res := <-ch:
		return res.sb, res.err
	case <-ctx.Done():
	}
	m.log.Info("start in a vm cancelled; waiting for it to finish so it can be undone",
		"vm", vm, "component", spec.Name, "wait", m.cfg.ReclaimWait)
	wctx, cancel := cleanup.Context(ctx, m.cfg.ReclaimWait)
	defer cancel()
	select {
	case res := <-ch:
		if res.err == nil {
			if err := m.removeFromVM(ctx, b, r, spec.Name); err != nil {
				m.log.Warn("undo a cancelled start in a vm; it goes with the vm", "vm", vm, "component", spec.Name, "err", err)
			}
		}
	case <-wctx.Done():
		m.log.Warn("gave up waiting for a cancelled start in a vm; it goes with the vm", "vm", vm, "component", spec.Name)
	}
	return agentenv.Sandbox{}, fmt.Errorf("start %s in %s: %w", spec.Name, vm, context.Cause(ctx))
}

// RemoveFromVM removes the container name of the stack of the VM with record id vm and nothing
// else, on a cleanup context; one that is gone counts as removed.
func (m *Manager) RemoveFromVM(ctx context.Context, vm, name string) error {
	b, r, err := m.target(ctx, vm)
	if err != nil {
		return err
	}
	if b.a.VMHost == nil {
		return lacks(b, "host a VM stack")
	}
	return m.removeFromVM(ctx, b, r, name)
}

func (m *Manager) removeFromVM(ctx context.Context, b *backend, vm agentenv.Record, name string) error {
	cctx, cancel := cleanup.Context(ctx, m.cfg.TerminateTimeout)
	defer cancel()
	return b.a.VMHost.RemoveFromVM(cctx, vm.SandboxID, name)
}

// ExecInVM runs argv in the container name of the stack of the VM with record id vm, with env
// added and stdin on its standard input, for at most the exec timeout. It is an error wrapping
// ErrInvalid if the provider cannot run commands in a VM's stack.
func (m *Manager) ExecInVM(ctx context.Context, vm, name string, argv []string, env map[string]string, stdin []byte) (agentenv.ExecResult, error) {
	b, r, err := m.target(ctx, vm)
	if err != nil {
		return agentenv.ExecResult{}, err
	}
	if b.a.VMExecer == nil {
		return agentenv.ExecResult{}, lacks(b, "run commands in a VM's stack")
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.ExecTimeout)
	defer cancel()
	return b.a.VMExecer.ExecInVM(cctx, r.SandboxID, name, argv, env, stdin)
}

// Listed is one line of an inventory: a record of the ledger, a sandbox a provider lists, or
// both, and what that means.
type Listed struct {
	Record  agentenv.Record   // zero ID for a sandbox no record names
	Sandbox *agentenv.Sandbox // as listed; nil if the provider does not list it
	// Status is live, exited(N), gone (the record is, and nothing is listed), missing (the
	// record is up but nothing is listed), leaked (the record is gone but the sandbox is
	// listed), unrecorded (listed, with no record) or in_vm (a container added to a VM's stack,
	// which providers do not list: its record's state is what is known).
	Status string
}

// Inventory joins the ledger's records (those not yet gone, or all) with what their providers,
// and the providers named in also, list for agentenv. A provider that cannot be listed is
// skipped and named in the returned warnings.
func (m *Manager) Inventory(ctx context.Context, all bool, also ...string) ([]Listed, []string, error) {
	var flt agentenv.Filter
	if !all {
		flt.States = agentenv.NotGone()
	}
	recs, err := m.cfg.Ledger.List(ctx, flt)
	if err != nil {
		return nil, nil, err
	}
	names := map[string]bool{}
	for _, r := range recs {
		names[r.Provider] = true
	}
	for _, n := range also {
		names[n] = true
	}
	var warnings []string
	listed := map[string]agentenv.Sandbox{}
	for name := range names {
		b, ok := m.backends[name]
		if !ok {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		sbs, err := b.p.List(lctx, nil)
		cancel()
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("cannot list %s: %v", name, err))
			continue
		}
		for _, sb := range sbs {
			listed[sb.Labels[agentenv.LabelRecord]] = sb
		}
	}
	var out []Listed
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.ID] = true
		l := Listed{Record: r}
		if sb, ok := listed[r.ID]; ok {
			l.Sandbox = &sb
		}
		l.Status = status(r, l.Sandbox)
		out = append(out, l)
	}
	for id, sb := range listed {
		if seen[id] {
			continue
		}
		l := Listed{Sandbox: &sb, Status: "unrecorded"}
		if r, err := m.cfg.Ledger.Get(ctx, id); err == nil {
			if r.State != agentenv.StateGone {
				continue // up, but outside the filter: not this listing's business
			}
			l.Record, l.Status = r, "leaked"
		} else {
			l.Record.Expires, _ = time.Parse(time.RFC3339, sb.Labels[agentenv.LabelExpires])
		}
		out = append(out, l)
	}
	return out, warnings, nil
}

// status says what is true of record r on its provider, given what it lists (nil for nothing).
func status(r agentenv.Record, sb *agentenv.Sandbox) string {
	switch {
	case r.Kind == agentenv.KindInVM && r.State == agentenv.StateGone:
		return "gone"
	case r.Kind == agentenv.KindInVM:
		return "in_vm" // inside its VM's stack, which its provider does not list
	case sb != nil && r.State == agentenv.StateGone:
		return "leaked"
	case sb != nil && sb.State == agentenv.SandboxExited:
		return fmt.Sprintf("exited(%d)", sb.ExitCode)
	case sb != nil:
		return "live"
	case r.State == agentenv.StateGone:
		return "gone"
	}
	return "missing"
}

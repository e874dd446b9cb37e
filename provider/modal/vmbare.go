package modal

// A bare sandbox on the modal_vm provider: Create makes a VM whose only container, "main", runs
// the spec (see vm.go's notes and Create).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// stateTimeout bounds the exec that reads the state of a VM's main container.
const stateTimeout = 30 * time.Second

// vmMeta is what a sandbox's own tags say of it in VM mode.
type vmMeta struct {
	vm    bool        // a modal_vm VM
	main  string      // the one container of a VM made by Create; "" for a stack's VM
	ports map[int]int // main's ports on the VM's slots
}

// metaOf reads vmMeta from tags and deletes the tags that carry it.
func metaOf(tags map[string]string) vmMeta {
	m := vmMeta{vm: tags[tagMode] == modeVM, main: tags[tagMain], ports: vmdocker.ParseSlots(tags[tagPorts])}
	delete(tags, tagMode)
	delete(tags, tagMain)
	delete(tags, tagPorts)
	return m
}

// createBare is Create on a VM-mode Provider: CreateVM from Config.VMImage (spec's Name,
// Labels, Expires, Timeout, CPUs and Memory are the VM's), then spec's image, command, env,
// workdir, capabilities, files and ports run as the VM's only container, "main", as RunInVM
// runs one (the image uploaded from this host's engine unless the VM has it), its ports on the
// VM's first slots (the service DB role's on the unencrypted ones). The Sandbox is the VM (ID
// the Modal sandbox id, Name the record id) with main's endpoints and state: exited, with its
// exit code, if main exited at once. On any error or cancellation after the VM was made, the
// VM is terminated (detached, bounded) before createBare returns.
func (p *Provider) createBare(ctx context.Context, spec agentenv.SandboxSpec) (_ agentenv.Sandbox, err error) {
	if !cloudapi.RecordName.MatchString(spec.Name) {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create: sandbox name %q: want [a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}: %w", spec.Name, agentenv.ErrInvalid)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: label %s=%q, want the record id: %w", spec.Name, agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	if spec.Network != "" {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: %s is VM mode, which has no private networks: %w", spec.Name, p.cfg.Name, agentenv.ErrInvalid)
	}
	main := agentenv.SandboxSpec{Name: mainContainer, Image: spec.Image, Command: spec.Command, Env: spec.Env,
		WorkDir: spec.WorkDir, CapAdd: spec.CapAdd, Files: spec.Files, Ports: spec.Ports, Labels: spec.Labels}
	if err := checkRun(main); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: %w", spec.Name, err)
	}
	enc, tcp := p.slotPorts()
	pool := enc
	if spec.Labels[agentenv.LabelRole] == roleServiceDB {
		pool = tcp
	}
	if len(spec.Ports) > len(pool) {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: %d ports, a vm has %d slots for them: %w", spec.Name, len(spec.Ports), len(pool), agentenv.ErrInvalid)
	}
	slots, err := p.pickSlots(nil, main) // a fresh VM: its first slots
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: %w", spec.Name, err)
	}
	vmSpec := agentenv.SandboxSpec{Name: spec.Name, Labels: spec.Labels, Expires: spec.Expires, Timeout: spec.Timeout,
		CPUs: spec.CPUs, Memory: spec.Memory}
	vm, err := p.createVM(ctx, vmSpec, p.cfg.VMImage, map[string]string{tagMain: mainContainer, tagPorts: vmdocker.FormatSlots(slots)})
	if err != nil {
		return agentenv.Sandbox{}, err // createVM terminated what it made
	}
	defer func() {
		if err != nil {
			p.rel.Release(ctx, vm.ID, spec.Name)
		}
	}()
	in, err := p.runInVM(ctx, vm.ID, main, slots)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: run it in vm %s: %w", spec.Name, vm.ID, ctxerr.Prefer(ctx, err))
	}
	vm.State, vm.ExitCode, vm.Endpoints, vm.ImageNote = in.State, in.ExitCode, in.Endpoints, in.ImageNote
	p.log.Debug("sandbox created in a vm", "record_id", spec.Name, "sandbox_id", vm.ID, "state", vm.State)
	return vm, nil
}

// asMain turns d, a VM made by Create as describe reports it (with its slots' endpoints), into
// the Sandbox of its main container: main's ports' endpoints, and main's state, read by one
// exec in sb. A VM that finishes meanwhile is ErrGone; an exec that fails otherwise leaves d
// running, as far as anyone can tell.
func (p *Provider) asMain(ctx context.Context, sb *modal.Sandbox, d agentenv.Sandbox, m vmMeta) (agentenv.Sandbox, error) {
	eps := map[string]string{}
	for port, slot := range m.ports {
		if ep := d.Endpoints[strconv.Itoa(slot)]; ep != "" {
			eps[strconv.Itoa(port)] = ep
		}
	}
	d.Endpoints = eps
	sctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	res, err := p.exec(sctx, sb, vmdocker.StateScript(m.main), nil, stateTimeout)
	switch {
	case err != nil && ctx.Err() != nil:
		return agentenv.Sandbox{}, ctx.Err()
	case errors.Is(err, agentenv.ErrGone), errors.Is(err, agentenv.ErrNotFound):
		return agentenv.Sandbox{}, err
	case err != nil || res.ExitCode != 0:
		p.log.Debug("state of a vm's main container unknown", "sandbox_id", d.ID, "err", err, "exit_code", res.ExitCode)
		return d, nil
	}
	f := strings.Fields(string(res.Stdout))
	if len(f) != 2 {
		return d, nil
	}
	switch f[0] {
	case "exited", "dead":
		d.State = agentenv.SandboxExited
		if d.ExitCode, err = strconv.Atoi(f[1]); err != nil {
			d.ExitCode = -1
		}
	case "created":
		d.State = agentenv.SandboxCreating
	}
	return d, nil
}

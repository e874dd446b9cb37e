package vmdocker

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentenv/agentenv"
)

// VMs is the part of agentenv.VMHost and agentenv.VMExecer that every cloud whose VMs this
// package drives writes the same way: RunInVM (RunIn), RemoveFromVM (Remove) and ExecInVM
// (ExecIn), each checking its names, finding the VM with Find and wrapping its error as
// "PREFIX: run NAME in VM: ...". A provider embeds it, set once in New, and keeps CreateVM (and
// shadows a method it does another way, as tenki's ExecInVM streams stdin).
type VMs struct {
	Prefix   string // the provider's package name, which starts every error ("e2b")
	Provider string // the provider's configured name, which the containers' sandboxes carry
	// Valid reports whether name is a container name the cloud takes (a record id).
	Valid func(name string) bool
	// Find returns VM vm as a Host, with the VM's labels: what its shell is, where its images and
	// ports come from. A VM that is gone is agentenv.ErrGone; a sandbox that is not a VM of the
	// provider, agentenv.ErrInvalid.
	Find func(ctx context.Context, vm string) (Host, error)
}

// RunInVM starts spec as a container of vm's stack with RunIn; a container name the cloud does
// not take, or no image, is agentenv.ErrInvalid before the VM is asked.
func (v VMs) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if !v.Valid(spec.Name) || spec.Image == "" {
		return agentenv.Sandbox{}, fmt.Errorf("%s: run %s in %s: want a container name and an image: %w", v.Prefix, spec.Name, vm, agentenv.ErrInvalid)
	}
	h, err := v.Find(ctx, vm)
	if err == nil {
		var sb agentenv.Sandbox
		if sb, err = RunIn(ctx, h, v.Provider, spec); err == nil {
			return sb, nil
		}
	}
	return agentenv.Sandbox{}, fmt.Errorf("%s: run %s in %s: %w", v.Prefix, spec.Name, vm, err)
}

// RemoveFromVM force-removes container name from vm with Remove; a container, or a VM, that is
// gone counts as removed.
func (v VMs) RemoveFromVM(ctx context.Context, vm, name string) error {
	if !v.Valid(name) {
		return fmt.Errorf("%s: remove %q from %s: %w", v.Prefix, name, vm, agentenv.ErrInvalid)
	}
	h, err := v.Find(ctx, vm)
	if errors.Is(err, agentenv.ErrGone) {
		return nil
	}
	if err == nil {
		err = Remove(ctx, h.Shell, name)
	}
	if err != nil {
		return fmt.Errorf("%s: remove %s from %s: %w", v.Prefix, name, vm, err)
	}
	return nil
}

// ExecInVM runs argv in container name of vm with env and stdin, with ExecIn. A container that
// does not exist is agentenv.ErrNotFound (its result returned too); a VM that is gone,
// agentenv.ErrGone.
func (v VMs) ExecInVM(ctx context.Context, vm, name string, argv []string, env map[string]string, stdin []byte) (agentenv.ExecResult, error) {
	if !v.Valid(name) || len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("%s: exec in %s of %s: want a container name and a command: %w", v.Prefix, vm, name, agentenv.ErrInvalid)
	}
	h, err := v.Find(ctx, vm)
	var res agentenv.ExecResult
	if err == nil {
		res, err = ExecIn(ctx, h, name, argv, env, stdin)
	}
	if err != nil {
		return res, fmt.Errorf("%s: exec in %s of %s: %w", v.Prefix, vm, name, err)
	}
	return res, nil
}

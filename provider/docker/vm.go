package docker

import (
	"context"
	"fmt"
	"maps"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/engine"
)

var _ agentenv.VMHost = (*Provider)(nil)

// CreateVM implements agentenv.VMHost. On the local engine a "VM" is a private network whose
// containers all carry the VM's record label: the stack runs on this engine as containers, and
// Terminate of the VM removes every one of them, the network and any volumes.
func (p *Provider) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	return p.CreateNetwork(ctx, agentenv.NetworkSpec{Name: spec.Name, Labels: spec.Labels})
}

// RunInVM implements agentenv.VMHost: the container is named VM-NAME, joins the VM's network
// as NAME, and carries the VM's labels.
func (p *Provider) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if err := checkID(vm); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: run in vm: %w", err)
	}
	res, err := p.cli.NetworkInspect(ctx, vm, client.NetworkInspectOptions{})
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: run %s in vm %s: %w", spec.Name, vm, engine.Kind(p.host, err))
	}
	labels := maps.Clone(res.Network.Labels)
	if labels[agentenv.LabelRecord] != vm {
		return agentenv.Sandbox{}, fmt.Errorf("docker: run %s in vm %s: not an agentenv vm: %w", spec.Name, vm, agentenv.ErrInvalid)
	}
	if role := spec.Labels[agentenv.LabelRole]; role != "" {
		labels[agentenv.LabelRole] = role
	}
	name := vm + "-" + spec.Name
	spec.Labels = labels
	spec.Network = vm
	spec.Aliases = append([]string{spec.Name}, spec.Aliases...)
	return p.create(ctx, name, spec, func(ctx context.Context) error {
		_, err := p.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		return err
	})
}

// RemoveFromVM implements agentenv.VMHost.
func (p *Provider) RemoveFromVM(ctx context.Context, vm, name string) error {
	if err := checkID(vm); err != nil {
		return fmt.Errorf("docker: remove from vm: %w", err)
	}
	_, err := p.cli.ContainerRemove(ctx, vm+"-"+name, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: remove %s from vm %s: %w", name, vm, engine.Kind(p.host, err))
	}
	return nil
}

package docker

import (
	"context"
	"fmt"
	"maps"
	"strings"

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
// as NAME (with spec.Network, the network VM-NETWORK instead, made with the VM's labels so that
// the VM's Terminate removes it too), and carries the VM's labels.
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
	if spec.Network == "" {
		spec.Network = vm
	} else if spec.Network, err = p.ensureVMNetwork(ctx, vm, spec.Network, res.Network.Labels); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: run %s in vm %s: %w", spec.Name, vm, err)
	}
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
	var nets []string
	if c, err := p.cli.ContainerInspect(ctx, vm+"-"+name, client.ContainerInspectOptions{}); err == nil && c.Container.NetworkSettings != nil {
		for n := range c.Container.NetworkSettings.Networks {
			if n != vm && strings.HasPrefix(n, vm+"-") {
				nets = append(nets, n)
			}
		}
	}
	_, err := p.cli.ContainerRemove(ctx, vm+"-"+name, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: remove %s from vm %s: %w", name, vm, engine.Kind(p.host, err))
	}
	// A deployment's own network in the VM goes with its last container; while others are on
	// it, the engine refuses, and it stays for them (or for the VM's Terminate).
	for _, n := range nets {
		if _, err := p.cli.NetworkRemove(ctx, n, client.NetworkRemoveOptions{}); err != nil {
			p.log.Debug("vm network kept", "record_id", vm, "network", n, "err", err)
		}
	}
	return nil
}

// ensureVMNetwork returns the name of the network VM-NET, made with labels unless it exists.
func (p *Provider) ensureVMNetwork(ctx context.Context, vm, net string, labels map[string]string) (string, error) {
	name := vm + "-" + net
	if err := checkID(name); err != nil {
		return "", err
	}
	p.netMu.Lock()
	defer p.netMu.Unlock()
	if _, err := p.cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{}); err == nil {
		return name, nil
	}
	if _, err := p.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge", Labels: labels}); err != nil {
		return "", fmt.Errorf("network %s: %w", name, engine.Kind(p.host, err))
	}
	return name, nil
}

package modal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"strings"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
)

// sandboxPrefix starts every Modal sandbox id (Modal's object ids are a type prefix, a dash
// and base-62 characters). Any other id given to this provider is a logical network's.
const sandboxPrefix = "sb-"

// roleServiceDB is the agentenv.role of the service DB (agentenv.RoleServiceDB), whose port speaks
// the Postgres protocol and so gets an unencrypted tunnel.
const roleServiceDB = "service_db"

// i6pnHost is the name a Modal container resolves to its own i6pn address.
const i6pnHost = "i6pn.modal.local"

// lookupCommands resolve i6pnHost inside a sandbox, tried in order until one prints an
// address: agentenv's own lookup, which its FROM scratch images hold at /agentenv, then getent,
// which Debian-based images (the service DB, adminer) have.
var lookupCommands = [][]string{
	{"/agentenv", "resolve", i6pnHost},
	{"getent", "ahosts", i6pnHost},
}

// lookupTimeout bounds the exec that reads a sandbox's private address.
const lookupTimeout = 30 * time.Second

// CreateNetwork makes the logical i6pn network of one deployment: nothing is created at Modal
// (i6pn is workspace-wide; what makes a group is the region its sandboxes are pinned to). The
// id is spec.Name, the record id (as the Networker contract's List by record wants; it never
// starts with "sb-", as Modal's sandbox ids do, so Terminate and Get tell them apart). It needs credentials, like every call, and Config.Region, which
// container mode requires: without it the error wraps ErrInvalid and names the setting.
//
// As the agentenv.Networker contract asks, List finds the network by its labels until it is
// terminated, but only in the process whose Provider made it: nothing of it exists at Modal,
// so another process (gc) lists none, and there is nothing for it to reap.
//
// A VM-mode Provider (Config.VM) has no private networks: ErrInvalid.
func (p *Provider) CreateNetwork(ctx context.Context, spec agentenv.NetworkSpec) (agentenv.Sandbox, error) {
	if p.cfg.VM {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create network %s: %s is VM mode, which has no private networks: %w", spec.Name, p.cfg.Name, agentenv.ErrInvalid)
	}
	if !cloudapi.RecordName.MatchString(spec.Name) {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create network: name %q: want [a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}: %w", spec.Name, agentenv.ErrInvalid)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create network %s: label %s=%q, want the record id: %w", spec.Name, agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	if err := p.needRegion("create network " + spec.Name); err != nil {
		return agentenv.Sandbox{}, err
	}
	if p.cfg.TokenID == "" || p.cfg.TokenSecret == "" {
		return agentenv.Sandbox{}, fmt.Errorf("modal: no credentials: %s: %w: %w", p.cfg.CredentialHint, agentenv.ErrInvalid, agentenv.ErrUnavailable)
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create network %s: %w", spec.Name, err)
	}
	p.log.Debug("logical i6pn network", "record_id", spec.Name, "region", p.cfg.Region)
	if strings.HasPrefix(spec.Name, sandboxPrefix) {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create network %s: a network's record id must not start with %q: %w", spec.Name, sandboxPrefix, agentenv.ErrInvalid)
	}
	sb := agentenv.Sandbox{ID: spec.Name, Name: spec.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: maps.Clone(spec.Labels), Created: time.Now()}
	p.mu.Lock()
	p.nets[sb.ID] = sb
	p.mu.Unlock()
	return sb, nil
}

// listNetworks returns the live logical networks made here that carry every one of labels.
func (p *Provider) listNetworks(labels map[string]string) []agentenv.Sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []agentenv.Sandbox
	for _, n := range p.nets {
		match := true
		for k, v := range labels {
			if n.Labels[k] != v {
				match = false
			}
		}
		if match {
			n.Labels = maps.Clone(n.Labels)
			out = append(out, n)
		}
	}
	return out
}

// needRegion fails with ErrInvalid, naming the setting, when no region is configured.
func (p *Provider) needRegion(op string) error {
	if p.cfg.Region == "" {
		return fmt.Errorf("modal: %s: container mode needs one region to pin its sandboxes to (i6pn reaches only sandboxes of one region): set %s (one of %v): %w",
			op, p.cfg.RegionHint, Regions, agentenv.ErrInvalid)
	}
	return nil
}

// checkNetwork vets a create's network before anything is made.
func (p *Provider) checkNetwork(record, network string) error {
	if !isNetwork(network) {
		return fmt.Errorf("modal: create %s: network %q is not an i6pn network of this provider: %w", record, network, agentenv.ErrInvalid)
	}
	return p.needRegion("create " + record)
}

// isNetwork reports whether id is a logical network's rather than a Modal sandbox's.
func isNetwork(id string) bool { return !strings.HasPrefix(id, sandboxPrefix) }

// network returns the live logical network id made by this Provider, as Get reports it.
func (p *Provider) network(id string) (agentenv.Sandbox, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.nets[id]
	n.Labels = maps.Clone(n.Labels)
	return n, ok
}

// privateHost reads sb's i6pn address by resolving i6pnHost inside it (lookupCommands through
// the SDK's exec, the first that answers), bounded by lookupTimeout in all. An image that can
// run none of them is ErrInvalid, naming what was tried.
func (p *Provider) privateHost(ctx context.Context, sb *modal.Sandbox) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	var errs []error
	for _, argv := range lookupCommands {
		addr, err := lookup(ctx, sb, argv)
		if err == nil {
			return addr, nil
		}
		if ctx.Err() != nil || errors.Is(err, agentenv.ErrGone) {
			return "", fmt.Errorf("private address of %s: %w", sb.SandboxID, err)
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("private address of %s: the image must be able to resolve %s (with /agentenv resolve or getent): %w: %w",
		sb.SandboxID, i6pnHost, errors.Join(errs...), agentenv.ErrInvalid)
}

// lookup runs argv in sb and returns the first address it prints.
func lookup(ctx context.Context, sb *modal.Sandbox, argv []string) (string, error) {
	proc, err := sb.Exec(ctx, argv, &modal.SandboxExecParams{Timeout: lookupTimeout})
	if err != nil {
		return "", fmt.Errorf("exec %v: %w", argv, kind(err))
	}
	var out, stderr bytes.Buffer
	if _, err := io.Copy(&out, io.LimitReader(proc.Stdout, 1<<16)); err != nil {
		return "", fmt.Errorf("%v: read output: %w", argv, kind(err))
	}
	_, _ = io.Copy(&stderr, io.LimitReader(proc.Stderr, 1<<12))
	code, err := proc.Wait(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("wait for %v: %w", argv, kind(err))
	}
	if code != 0 {
		return "", fmt.Errorf("%v exited %d (%s)", argv, code, strings.TrimSpace(stderr.String()))
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			if a, err := netip.ParseAddr(f[0]); err == nil {
				return a.String(), nil
			}
		}
	}
	return "", fmt.Errorf("%v printed no address: %q", argv, out.String())
}

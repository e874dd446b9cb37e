package modal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/cloudapi"
)

// terminatedCode is the exit code the SDK reports for a sandbox that was terminated.
const terminatedCode = 137

// Create makes a sandbox named spec.Name, tagged spec.Labels, running spec.Image, with the
// backstop timeout always set, and returns once Modal has scheduled it and its tunnels are
// known. The request runs on a detached context bounded by CreateTimeout, so Create always
// learns what Modal made: if ctx ends meanwhile, or anything after the request fails, the
// sandbox is terminated before Create returns. A request refused for rate or capacity
// (RESOURCE_EXHAUSTED) is ErrUnavailable; an image Modal cannot build is ErrInvalid. With
// spec.Pinned, Modal builds the pinned image from its registry, and spec.Image when it cannot
// (Sandbox.ImageNote says which). A name
// already in use is taken to be this create's own: the SDK retries a request whose answer was
// lost, and the record id it names is never reused, so the one sandbox tagged with it is adopted.
//
// With spec.Network (an id from CreateNetwork) the sandbox has i6pn and is pinned to
// Config.Region, and Create also reports its PrivateHost, read by an exec in the sandbox (see
// the package doc); a missing region, or a network id not made here, is ErrInvalid before
// anything is created, and a sandbox whose address cannot be read is terminated.
//
// On a VM-mode Provider (Config.VM) the sandbox is a VM whose only container, "main", runs
// spec (see createBare): the Sandbox is the VM, with main's endpoints and state; spec.Network
// is ErrInvalid (no private networks), spec.Files are copied into main, and a VM made but not
// usable is terminated before Create returns.
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if p.cfg.VM {
		return p.createBare(ctx, spec)
	}
	if !cloudapi.RecordName.MatchString(spec.Name) {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create: sandbox name %q: want [a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}: %w", spec.Name, agentenv.ErrInvalid)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: label %s=%q, want the record id: %w", spec.Name, agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	if spec.Image == "" || len(spec.Files) > 0 {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: want an image, and no files (not supported here): %w", spec.Name, agentenv.ErrInvalid)
	}
	if spec.Network != "" {
		if err := p.checkNetwork(spec.Name, spec.Network); err != nil {
			return agentenv.Sandbox{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: %w", spec.Name, err)
	}
	client, app, done, err := p.admit(ctx, spec.Name)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	defer done()
	log := p.log.With("record_id", spec.Name, "image", spec.Image, "app", p.cfg.App, "regions", p.cfg.Regions)
	params := &modal.SandboxCreateParams{
		Name: spec.Name, Tags: maps.Clone(spec.Labels), Timeout: p.timeout(spec),
		Command: spec.Command, Env: spec.Env, Workdir: spec.WorkDir,
		CPU: spec.CPUs, MemoryMiB: int(spec.Memory >> 20), Regions: p.cfg.Regions,
	}
	if spec.Labels[agentenv.LabelRole] == roleServiceDB {
		params.UnencryptedPorts = spec.Ports
	} else {
		params.EncryptedPorts = spec.Ports
	}
	if spec.Network != "" {
		params.I6PN, params.Regions = true, []string{p.cfg.Region}
		log = log.With("regions", params.Regions, "i6pn", true)
	}
	log.Debug("create sandbox", "timeout", params.Timeout)
	image, note := client.Images.FromRegistry(spec.Image, nil), ""
	if spec.Pinned != "" {
		if image, note, err = p.pinned(ctx, client, app, spec); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: %w", spec.Name, err)
		}
		log.Debug("pinned image", "pinned", spec.Pinned, "how", note)
	}
	sb, err := p.launch(ctx, client, app, spec.Name, image, params)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	out := agentenv.Sandbox{ID: sb.SandboxID, Name: spec.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: maps.Clone(spec.Labels), Created: time.Now(), ImageNote: note}
	defer sb.Detach()
	out.Endpoints, err = p.endpoints(ctx, sb, p.cfg.TunnelWait)
	if err == nil && spec.Network != "" {
		out.PrivateHost, err = p.privateHost(ctx, sb)
	}
	if errors.Is(err, agentenv.ErrGone) {
		out.State, out.ExitCode = agentenv.SandboxExited, p.exitCode(ctx, sb)
		err = nil
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		p.rel.Release(ctx, sb.SandboxID, spec.Name)
		return agentenv.Sandbox{}, fmt.Errorf("modal: create %s: %w", spec.Name, err)
	}
	log.Debug("sandbox created", "sandbox_id", sb.SandboxID)
	return out, nil
}

// pinned returns the image of spec.Pinned, built by Modal from its registry (logging in with
// spec.PullAuth through an ephemeral Secret) within CreateTimeout, and how it came; when Modal
// cannot build it, spec.Image's image instead, the note saying why. Only ctx's end is an error.
func (p *Provider) pinned(ctx context.Context, client *modal.Client, app *modal.App, spec agentenv.SandboxSpec) (*modal.Image, string, error) {
	bctx, cancel := context.WithTimeout(ctx, p.cfg.CreateTimeout)
	defer cancel()
	image, err := func() (*modal.Image, error) {
		var params *modal.ImageFromRegistryParams
		if a := spec.PullAuth; a != nil {
			secret, err := client.Secrets.FromMap(bctx, map[string]string{"REGISTRY_USERNAME": a.Username, "REGISTRY_PASSWORD": a.Password}, nil)
			if err != nil {
				return nil, fmt.Errorf("registry login secret: %w", kind(err))
			}
			params = &modal.ImageFromRegistryParams{Secret: secret}
		}
		return client.Images.FromRegistry(spec.Pinned, params).Build(bctx, app, nil)
	}()
	if err == nil {
		return image, "pulled " + spec.Pinned, nil
	}
	if ctx.Err() != nil {
		return nil, "", ctx.Err()
	}
	return client.Images.FromRegistry(spec.Image, nil), fmt.Sprintf("pull of %s failed (%v); running %s", spec.Pinned, err, spec.Image), nil
}

// admit makes the SDK client and app, then waits for the rate limiter and a create slot, as
// every create does; done gives the slot back.
func (p *Provider) admit(ctx context.Context, record string) (client *modal.Client, app *modal.App, done func(), err error) {
	client, app, err = p.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	leave, err := p.gate.Enter(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("modal: create %s: %w", record, err)
	}
	return client, app, leave, nil
}

// launch sends the create request on a detached context bounded by CreateTimeout, so that it
// always learns what Modal made: a request whose outcome is unknown has whatever runs under
// record terminated, and a sandbox made after ctx ended is terminated before launch returns.
func (p *Provider) launch(ctx context.Context, client *modal.Client, app *modal.App, record string, image *modal.Image, params *modal.SandboxCreateParams) (*modal.Sandbox, error) {
	cctx, cancel := cleanup.Detached(ctx, p.cfg.CreateTimeout)
	sb, err := client.Sandboxes.Create(cctx, app, image, params)
	cancel()
	if err != nil {
		err = kind(err)
		if errors.Is(err, agentenv.ErrConflict) {
			// Names are record ids, written to the ledger before this create and never reused,
			// so the sandbox of that name is this create's: the SDK retried a request whose
			// first answer was lost (a dropped connection) after Modal had made it.
			sb, aerr := p.adopt(ctx, client, app, record)
			if aerr == nil {
				p.log.Debug("create answered already-exists: adopted the sandbox an earlier try made", "record_id", record, "sandbox_id", sb.SandboxID)
				return sb, nil
			}
			err = fmt.Errorf("%w (adopting it: %w)", err, aerr)
		}
		if !errors.Is(err, agentenv.ErrInvalid) {
			// The response may be lost though the sandbox exists: find it by name and end it.
			p.rel.Record(ctx, record)
		}
		return nil, fmt.Errorf("modal: create %s: %w", record, err)
	}
	if err := ctx.Err(); err != nil {
		p.rel.Release(ctx, sb.SandboxID, record)
		return nil, fmt.Errorf("modal: create %s: %w", record, err)
	}
	return sb, nil
}

// adopt finds the one running sandbox tagged with record, after a create of that name was
// refused as already existing.
func (p *Provider) adopt(ctx context.Context, client *modal.Client, app *modal.App, record string) (*modal.Sandbox, error) {
	cctx, cancel := cleanup.Detached(ctx, p.cfg.CreateTimeout)
	defer cancel()
	it, err := client.Sandboxes.List(cctx, &modal.SandboxListParams{AppID: app.AppID, Tags: map[string]string{agentenv.LabelRecord: record}})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", record, kind(err))
	}
	var found []*modal.Sandbox
	for sb, err := range it {
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", record, kind(err))
		}
		found = append(found, sb)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("list %s: %d running sandboxes, want 1: %w", record, len(found), agentenv.ErrConflict)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return found[0], nil
}

// endpoints reads sb's tunnels: host:port of a tunnel with an unencrypted (TCP) host, else the
// encrypted tunnel's https URL, by container port; ErrGone once it finished.
func (p *Provider) endpoints(ctx context.Context, sb *modal.Sandbox, wait time.Duration) (map[string]string, error) {
	ts, err := sb.Tunnels(ctx, wait, nil)
	if err != nil {
		return nil, fmt.Errorf("tunnels of %s: %w", sb.SandboxID, kind(err))
	}
	out := map[string]string{}
	for port, t := range ts {
		if t.UnencryptedHost != "" {
			out[strconv.Itoa(port)] = net.JoinHostPort(t.UnencryptedHost, strconv.Itoa(t.UnencryptedPort))
		} else {
			out[strconv.Itoa(port)] = t.URL()
		}
	}
	return out, nil
}

// exitCode returns sb's exit code, or -1 if it cannot be read.
func (p *Provider) exitCode(ctx context.Context, sb *modal.Sandbox) int {
	code, err := sb.Poll(ctx, nil)
	if err != nil || code == nil {
		return -1
	}
	return *code
}

// Get returns a live handle to sandbox id, with its tunnels. A sandbox that exited on its own
// is ErrGone; one that was terminated is both ErrGone and ErrNotFound (Modal keeps it only as
// history); an unknown id is ErrNotFound. A logical i6pn network this Provider made is reported
// running; any other id not shaped like a Modal sandbox's is ErrNotFound. A VM made by a
// VM-mode Create is reported with its main container's endpoints and state, read by an exec:
// once that container has exited, Get returns it exited, with its exit code, and ErrGone.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	if isNetwork(id) {
		if sb, ok := p.network(id); ok {
			return sb, nil
		}
		return agentenv.Sandbox{}, fmt.Errorf("modal: get %s: no such sandbox or network: %w", id, agentenv.ErrNotFound)
	}
	client, _, err := p.connect(ctx)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	sb, err := client.Sandboxes.FromID(ctx, id, nil)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("modal: get %s: %w", id, kind(err))
	}
	code, err := sb.Poll(ctx, nil)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("modal: get %s: %w", id, kind(err))
	}
	if code != nil {
		out := agentenv.Sandbox{ID: id, Provider: p.cfg.Name, State: agentenv.SandboxExited, ExitCode: *code}
		if *code == terminatedCode {
			return out, fmt.Errorf("modal: get %s: terminated: %w: %w", id, agentenv.ErrGone, agentenv.ErrNotFound)
		}
		return out, fmt.Errorf("modal: get %s: exit code %d: %w", id, *code, agentenv.ErrGone)
	}
	out, meta, err := p.describe(ctx, sb)
	if err == nil && meta.main != "" {
		out, err = p.asMain(ctx, sb, out, meta)
	}
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("modal: get %s: %w", id, err)
	}
	if out.State == agentenv.SandboxExited {
		return out, fmt.Errorf("modal: get %s: its container exited with code %d: %w", id, out.ExitCode, agentenv.ErrGone)
	}
	return out, nil
}

// describe reads a running sandbox's tags and tunnels (a VM's by slot port), and what its VM
// mode tags say (which it leaves out of the labels).
func (p *Provider) describe(ctx context.Context, sb *modal.Sandbox) (agentenv.Sandbox, vmMeta, error) {
	tags, err := sb.GetTags(ctx, nil)
	if err != nil {
		return agentenv.Sandbox{}, vmMeta{}, kind(err)
	}
	meta := metaOf(tags)
	eps, err := p.endpoints(ctx, sb, 5*time.Second)
	if err != nil {
		return agentenv.Sandbox{}, meta, err
	}
	return agentenv.Sandbox{ID: sb.SandboxID, Name: tags[agentenv.LabelRecord], Provider: p.cfg.Name,
		State: agentenv.SandboxRunning, Labels: tags, Endpoints: eps}, meta, nil
}

// Terminate ends sandbox id by id (FromID, then Terminate), with no tunnels and no exec. Modal
// makes it a no-op once the sandbox finished; one Modal does not know counts as gone. An id not
// shaped like a Modal sandbox's is a logical i6pn network's: a no-op success, since nothing of
// it exists at Modal.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if isNetwork(id) {
		p.mu.Lock()
		delete(p.nets, id)
		p.mu.Unlock()
		return nil // nothing exists at Modal
	}
	client, _, err := p.connect(ctx)
	if err != nil {
		return err
	}
	p.forgetVM(id)
	sb, err := client.Sandboxes.FromID(ctx, id, nil)
	if err == nil {
		_, err = sb.Terminate(ctx, nil)
	}
	if err = kind(err); err != nil && !errors.Is(err, agentenv.ErrNotFound) && !errors.Is(err, agentenv.ErrGone) {
		return fmt.Errorf("modal: terminate %s: %w", id, err)
	}
	p.log.Debug("terminated", "sandbox_id", id)
	return nil
}

// List returns the app's running sandboxes that carry every one of labels as tags (Modal does
// not list finished sandboxes; they cost nothing and need no teardown). A sandbox that finishes
// while it is being listed is left out. The logical i6pn networks this Provider made and has not
// terminated are listed too (see CreateNetwork). A VM made by a VM-mode Create is listed as Get
// reports it: exited, with its exit code, once its container has exited (the VM still runs, so
// it is listed until terminated).
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	client, app, err := p.connect(ctx)
	if err != nil {
		return nil, err
	}
	tags := maps.Clone(labels)
	if p.cfg.VM {
		// VM mode lists only its VMs; container mode skips them below (Modal cannot list by
		// a tag's absence).
		if tags == nil {
			tags = map[string]string{}
		}
		tags[tagMode] = modeVM
	}
	it, err := client.Sandboxes.List(ctx, &modal.SandboxListParams{AppID: app.AppID, Tags: tags})
	if err != nil {
		return nil, fmt.Errorf("modal: list: %w", kind(err))
	}
	var out []agentenv.Sandbox
	if !p.cfg.VM {
		out = p.listNetworks(labels)
	}
	for sb, err := range it {
		if err != nil {
			return nil, fmt.Errorf("modal: list: %w", kind(err))
		}
		d, meta, err := p.describe(ctx, sb)
		if err == nil && meta.vm == p.cfg.VM && meta.main != "" {
			d, err = p.asMain(ctx, sb, d, meta)
		}
		if errors.Is(err, agentenv.ErrGone) || errors.Is(err, agentenv.ErrNotFound) || meta.vm != p.cfg.VM {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("modal: list: %s: %w", sb.SandboxID, err)
		}
		if _, ok := d.Labels[agentenv.LabelRecord]; ok {
			out = append(out, d)
		}
	}
	return out, nil
}

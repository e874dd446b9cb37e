package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/engine"
)

// Terminate removes everything labelled agentenv.record=id: its containers (forced, with their
// anonymous volumes), then its networks (disconnecting any container still attached), its
// volumes (one still in use, by a container being removed, is tried again until ctx ends) and
// its images (forced, children first, with their untagged parents). The listings
// run concurrently, and so do the removals of each kind. An object that is already gone, or
// being removed, counts as removed; Terminate of an unknown id is nil. An image that a running
// container of another record still uses is not removed: the engine's error says which.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("docker: terminate: %w", err)
	}
	if err := p.terminate(ctx, id); err != nil {
		return fmt.Errorf("docker: terminate %s: %w", id, engine.Kind(p.host, err))
	}
	p.log.Debug("terminated", "record_id", id)
	return nil
}

func (p *Provider) terminate(ctx context.Context, id string) error {
	f := engine.IDFilter(id)
	var (
		wg                 sync.WaitGroup
		nets               []string
		vols               []string
		imgs, parents      []string
		netErr, volErr     error
		imgErr             error
		containerErrs      []error
		containerErrsMutex sync.Mutex
	)
	// Networks and volumes are listed while the containers go; they are removed after, since
	// a container still using them would make their removal fail.
	wg.Go(func() {
		res, err := p.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
		netErr = err
		for _, n := range res.Items {
			nets = append(nets, n.ID)
		}
	})
	wg.Go(func() {
		res, err := p.cli.ImageList(ctx, client.ImageListOptions{Filters: f})
		imgErr = err
		for _, im := range res.Items {
			imgs, parents = append(imgs, im.ID), append(parents, im.ParentID)
		}
	})
	wg.Go(func() {
		res, err := p.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
		volErr = err
		for _, v := range res.Items {
			vols = append(vols, v.Name)
		}
	})
	cs, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		wg.Wait()
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs.Items {
		wg.Go(func() {
			defer p.holdNetworks(c)()
			_, err := p.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !engine.IsGone(err) {
				containerErrsMutex.Lock()
				containerErrs = append(containerErrs, fmt.Errorf("remove container %s: %w", c.ID[:12], err))
				containerErrsMutex.Unlock()
			}
		})
	}
	wg.Wait()
	errs := containerErrs
	if netErr != nil {
		errs = append(errs, fmt.Errorf("list networks: %w", netErr))
	}
	if volErr != nil {
		errs = append(errs, fmt.Errorf("list volumes: %w", volErr))
	}
	if imgErr != nil {
		errs = append(errs, fmt.Errorf("list images: %w", imgErr))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	var mu sync.Mutex
	for _, n := range nets {
		wg.Go(func() {
			if err := p.removeNetwork(ctx, n); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("remove network %s: %w", n, err))
				mu.Unlock()
			}
		})
	}
	for _, v := range vols {
		wg.Go(func() {
			if err := p.removeVolume(ctx, v); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("remove volume %s: %w", v, err))
				mu.Unlock()
			}
		})
	}
	if len(imgs) > 0 {
		wg.Go(func() {
			if err := p.removeImages(ctx, imgs, parents); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// holdNetworks takes the detaching lock of each user-defined network container c is attached
// to, in one order, and returns what releases them. The engine's own networks (bridge, host,
// none) are never removed, so a count they lose does no harm, and every bare sandbox uses one.
func (p *Provider) holdNetworks(c container.Summary) (release func()) {
	var ids []string
	if c.NetworkSettings != nil {
		for name, ep := range c.NetworkSettings.Networks {
			if name == "bridge" || name == "host" || name == "none" || ep == nil || ep.NetworkID == "" {
				continue
			}
			ids = append(ids, ep.NetworkID)
		}
	}
	slices.Sort(ids)
	unlocks := make([]func(), 0, len(ids))
	for _, id := range ids {
		unlocks = append(unlocks, p.detaching.Lock(id))
	}
	return func() {
		for _, u := range slices.Backward(unlocks) {
			u()
		}
	}
}

// removeNetwork removes a network. If the engine refuses because endpoints are still attached,
// it first gives the engine a moment (bounded) to release them itself, as it does for the
// containers just removed: forcing a disconnect of an endpoint the engine is releasing races
// its own release, which docker.io 20.10 can answer with an endpoint count that never drops.
// Containers still attached after that are taken off (detach).
func (p *Provider) removeNetwork(ctx context.Context, netID string) error {
	_, err := p.cli.NetworkRemove(ctx, netID, client.NetworkRemoveOptions{})
	if err == nil || engine.IsGone(err) {
		return nil
	}
	var attached int
	for wait := 100 * time.Millisecond; wait <= 1600*time.Millisecond; wait *= 2 {
		res, ierr := p.cli.NetworkInspect(ctx, netID, client.NetworkInspectOptions{})
		if ierr != nil {
			if engine.IsGone(ierr) {
				return nil
			}
			return errors.Join(err, ierr)
		}
		attached = len(res.Network.Containers)
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
		_, err = p.cli.NetworkRemove(ctx, netID, client.NetworkRemoveOptions{})
		if err == nil || engine.IsGone(err) {
			return nil
		}
	}
	res, ierr := p.cli.NetworkInspect(ctx, netID, client.NetworkInspectOptions{})
	if ierr != nil {
		if engine.IsGone(ierr) {
			return nil
		}
		return errors.Join(err, ierr)
	}
	if len(res.Network.Containers) == 0 {
		// "has active endpoints" with no container attached, after the wait: a stale endpoint,
		// which only a dockerd restart clears.
		return fmt.Errorf("the engine keeps a stale endpoint on network %s with no container attached (%d were a moment ago; a dockerd restart clears it): %w", netID, attached, err)
	}
	dep := res.Network.Labels[agentenv.LabelDeployment]
	for cid := range res.Network.Containers {
		if err := p.detach(ctx, netID, cid, dep); err != nil {
			return err
		}
	}
	if _, err := p.cli.NetworkRemove(ctx, netID, client.NetworkRemoveOptions{}); err != nil && !engine.IsGone(err) {
		return err
	}
	return nil
}

// detach takes container cid off network netID. A container of the network's own deployment
// dep (one whose create finished after its record's teardown listed it) is removed, through the
// engine's own path, which releases its endpoint under the container's lock; any other is
// disconnected by force and runs on.
func (p *Provider) detach(ctx context.Context, netID, cid, dep string) error {
	if dep != "" {
		c, err := p.cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
		switch {
		case engine.IsGone(err):
			return nil
		case err != nil:
			return fmt.Errorf("inspect %s: %w", cid, err)
		case c.Container.Config != nil && c.Container.Config.Labels[agentenv.LabelDeployment] == dep:
			_, err := p.cli.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !engine.IsGone(err) {
				return fmt.Errorf("remove container %s of deployment %s: %w", cid, dep, err)
			}
			return nil
		}
	}
	_, err := p.cli.NetworkDisconnect(ctx, netID, client.NetworkDisconnectOptions{Container: cid, Force: true})
	if err != nil && !engine.IsGone(err) {
		return fmt.Errorf("disconnect %s: %w", cid, err)
	}
	return nil
}

// Get returns the running sandbox of record id for reattach. It is ErrNotFound when nothing
// carries the record's label, and ErrGone (with the Sandbox, State exited) when its containers
// have finished. A network record is running while the network exists.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	if err := checkID(id); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: get: %w", err)
	}
	sbs, err := p.list(ctx, map[string]string{agentenv.LabelRecord: id})
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: get %s: %w", id, engine.Kind(p.host, err))
	}
	if len(sbs) == 0 {
		return agentenv.Sandbox{}, fmt.Errorf("docker: get %s: %w", id, agentenv.ErrNotFound)
	}
	sb := sbs[0]
	if sb.State == agentenv.SandboxExited {
		return sb, fmt.Errorf("docker: get %s: exit code %d: %w", id, sb.ExitCode, agentenv.ErrGone)
	}
	return sb, nil
}

// List returns one Sandbox per record among the containers, networks, volumes and images that
// carry every one of labels and the agentenv.record label. A record is running if any of its
// containers runs (or it has only networks, volumes and images), exited if all its containers
// finished, and creating if none has started yet. A record's image reference (ImageRepo:ID)
// is its Sandbox.Image.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	sbs, err := p.list(ctx, labels)
	if err != nil {
		return nil, fmt.Errorf("docker: list: %w", engine.Kind(p.host, err))
	}
	return sbs, nil
}

func (p *Provider) list(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	l, err := engine.List(ctx, p.cli, engine.RecordFilter(labels))
	if err != nil {
		return nil, err
	}
	g := newGrouper(p.cfg.Name)
	for _, c := range l.Containers {
		g.container(c)
	}
	for _, n := range l.Networks {
		g.other(n.Labels, n.Created)
	}
	for _, v := range l.Volumes {
		created, _ := time.Parse(time.RFC3339, v.CreatedAt)
		g.other(v.Labels, created)
	}
	for _, im := range l.Images {
		gr := g.get(im.Labels, time.Unix(im.Created, 0))
		if ref := ImageRepo + ":" + gr.sb.ID; slices.Contains(im.RepoTags, ref) {
			gr.sb.Image = ref
		}
	}
	return g.sandboxes(), nil
}

// grouper folds containers, networks and volumes into one Sandbox per record.
type grouper struct {
	provider string
	byID     map[string]*group
}

type group struct {
	sb                        agentenv.Sandbox
	containers, running, made int
}

func newGrouper(provider string) *grouper {
	return &grouper{provider: provider, byID: make(map[string]*group)}
}

func (g *grouper) get(labels map[string]string, created time.Time) *group {
	id := labels[agentenv.LabelRecord]
	gr, ok := g.byID[id]
	if !ok {
		gr = &group{sb: agentenv.Sandbox{
			ID: id, Name: id, Provider: g.provider, Labels: labels,
			Endpoints: map[string]string{}, Created: created,
		}}
		g.byID[id] = gr
	}
	if !created.IsZero() && (gr.sb.Created.IsZero() || created.Before(gr.sb.Created)) {
		gr.sb.Created = created
	}
	return gr
}

func (g *grouper) container(c container.Summary) {
	gr := g.get(c.Labels, time.Unix(c.Created, 0))
	if gr.containers == 0 {
		gr.sb.Labels = c.Labels // a container's labels are the sandbox's own
	}
	gr.containers++
	switch sandboxState(c.State) {
	case agentenv.SandboxRunning:
		gr.running++
	case agentenv.SandboxExited:
		if code := exitCodeFromStatus(c.Status); code != 0 || gr.sb.ExitCode == 0 {
			gr.sb.ExitCode = code
		}
	case agentenv.SandboxCreating:
		gr.made++
	}
	for k, v := range endpointsFromSummary(c.Ports) {
		gr.sb.Endpoints[k] = v
	}
}

func (g *grouper) other(labels map[string]string, created time.Time) {
	g.get(labels, created)
}

func (g *grouper) sandboxes() []agentenv.Sandbox {
	out := make([]agentenv.Sandbox, 0, len(g.byID))
	for _, gr := range g.byID {
		switch {
		case gr.containers == 0 || gr.running > 0:
			gr.sb.State = agentenv.SandboxRunning
		case gr.made > 0:
			gr.sb.State = agentenv.SandboxCreating
		default:
			gr.sb.State = agentenv.SandboxExited
		}
		if gr.sb.State != agentenv.SandboxExited {
			gr.sb.ExitCode = 0
		}
		out = append(out, gr.sb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// exitCodeFromStatus reads the exit code from a listing's status text, such as
// "Exited (137) 5 seconds ago"; it is 0 when the text has none.
func exitCodeFromStatus(status string) int {
	_, rest, ok := strings.Cut(status, "(")
	if !ok {
		return 0
	}
	num, _, ok := strings.Cut(rest, ")")
	if !ok {
		return 0
	}
	var code int
	if _, err := fmt.Sscanf(num, "%d", &code); err != nil {
		return 0
	}
	return code
}

package tenki

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/shellquote"
	"github.com/agentenv/agentenv/provider/tenki/internal/wire"
)

// Metadata keys agentenv keeps beside the labels, and the tag every session it makes carries
// (List asks the service for that tag only).
const (
	metaPorts = "agentenv.tenki.ports" // the guest ports Create exposed, "8080,9000"
	metaMode  = "agentenv.tenki.mode"  // "vm" on a VM-mode session
	modeVM    = "vm"
	Tag       = "agentenv"
)

// Owner of the sessions agentenv creates, as the SDKs send it: the key's own workspace.
const (
	ownerType = "SERVICE"
	ownerID   = "self"
)

// mainArg is the $0 of the wrapper that runs a bare sandbox's command (see startScript).
const mainArg = "agentenv-main"

// Create makes a session named spec.Name, labelled in its metadata, from spec.Image
// (Config.Image if empty; Tenki's default image if neither), with max_duration always set, and
// waits until it runs (the service holds the answer until then, and Create polls if it did
// not). It then writes spec.Files, starts spec.Command (if any) as root through Run with
// spec.Env and spec.WorkDir, detached and followed by a shutdown of the guest so that the
// sandbox finishes when its command does, and exposes spec.Ports as preview URLs. The create
// call and the wait run on a detached context bounded by CreateTimeout, so Create always learns
// what Tenki made: if ctx ends meanwhile, or anything after the call fails, the session is
// terminated before Create returns. A create refused for rate, quota or credentials is
// ErrUnavailable; a bad spec is ErrInvalid and nothing is created.
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if err := p.check(spec); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tenki: create %s: %w", spec.Name, err)
	}
	image := cmp.Or(spec.Image, p.cfg.Image)
	if err := cloudapi.CheckImages(image); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tenki: create %s: %w", spec.Name, err)
	}
	meta := cloudapi.Labels(spec)
	if len(spec.Ports) > 0 {
		meta[metaPorts] = cloudapi.JoinPorts(spec.Ports)
	}
	sess, err := p.create(ctx, spec.Name, p.request(spec, image, meta, len(spec.Ports) > 0))
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	sb, err := p.setUp(ctx, sess, spec)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		p.rel.Release(ctx, sess.ID, spec.Name)
		return agentenv.Sandbox{}, fmt.Errorf("tenki: create %s: %w", spec.Name, ctxerr.Prefer(ctx, err))
	}
	return sb, nil
}

// setUp writes spec's files into the running session, starts its command and exposes its ports.
func (p *Provider) setUp(ctx context.Context, sess *wire.Session, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	for _, path := range slices.Sorted(maps.Keys(spec.Files)) {
		if err := p.writeFile(ctx, sess.ID, path, spec.Files[path]); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("write %s: %w", path, err)
		}
	}
	if len(spec.Command) > 0 {
		argv := append([]string{"/bin/sh", "-c", startScript(spec.WorkDir), mainArg}, spec.Command...)
		res, err := p.run(ctx, sess.ID, wire.RunStart{Cmd: argv, Env: spec.Env, Privileged: true}, nil)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		if err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("start the command: %w", err)
		}
	}
	sb := p.sandbox(sess)
	for _, port := range spec.Ports {
		url, err := p.expose(ctx, sess.ID, port)
		if err != nil {
			return agentenv.Sandbox{}, err
		}
		sb.Endpoints[strconv.Itoa(port)] = url
	}
	return sb, nil
}

// startScript is the /bin/sh -c script that starts "$@" (a bare sandbox's command) in its own
// session, detached, its output in a log file, in dir if set, and shuts the guest down when it
// exits, so that the sandbox finishes with its command.
func startScript(dir string) string {
	var run strings.Builder
	if dir != "" {
		run.WriteString("cd " + shellquote.Join([]string{dir}) + " && ")
	}
	run.WriteString(`"$@"; poweroff -f || poweroff`)
	return "setsid /bin/sh -c " + shellquote.Join([]string{run.String()}) + ` sh "$@" </dev/null >/var/log/agentenv-main.log 2>&1 &`
}

// request is the CreateSession request of spec: named, labelled, tagged, timed out, sized.
func (p *Provider) request(spec agentenv.SandboxSpec, image string, meta map[string]string, inbound bool) wire.CreateSessionRequest {
	maxDuration := wire.Duration(time.Duration(p.backstop.Seconds(spec)) * time.Second)
	req := wire.CreateSessionRequest{
		OwnerID: ownerID, OwnerType: ownerType, Name: spec.Name, Metadata: meta, Tags: []string{Tag},
		MaxDuration: &maxDuration, AllowInbound: &inbound, WaitReady: true,
	}
	if image != "" {
		req.RegistryRef = &image
	}
	if spec.CPUs > 0 {
		cores := int32(min(16, max(1, math.Ceil(spec.CPUs))))
		req.CPUCores = &cores
	}
	if spec.Memory > 0 {
		mb := int32(min(65536, max(128, (spec.Memory>>20+1)&^1))) // whole MiB, aligned to 2 MiB
		req.MemoryMB = &mb
	}
	return req
}

// check validates spec before anything is sent.
func (p *Provider) check(spec agentenv.SandboxSpec) error {
	if err := cloudapi.CheckRecord(spec); err != nil {
		return err
	}
	if spec.Network != "" || len(spec.Aliases) > 0 {
		return fmt.Errorf("networks and aliases are not supported here (Tenki has no private network between sessions): %w", agentenv.ErrInvalid)
	}
	for path := range spec.Files {
		if !strings.HasPrefix(path, "/") {
			return fmt.Errorf("file %q: want an absolute path: %w", path, agentenv.ErrInvalid)
		}
	}
	for _, port := range spec.Ports {
		if port <= 0 || port > 65535 {
			return fmt.Errorf("port %d: want 1-65535: %w", port, agentenv.ErrInvalid)
		}
	}
	return nil
}

// create sends req, waits for the session to run and returns it; see Create for what it
// guarantees.
func (p *Provider) create(ctx context.Context, record string, req wire.CreateSessionRequest) (*wire.Session, error) {
	cctx, end, err := p.creates.Begin(ctx, record)
	if err != nil {
		return nil, err
	}
	defer end()
	image := ""
	if req.RegistryRef != nil {
		image = *req.RegistryRef
	}
	log := p.log.With("record_id", record, "image", image)
	log.Debug("create session", "max_duration", time.Duration(*req.MaxDuration))

	created, err := call(cctx, p, p.createSession, &req)
	if err == nil && (created.Session == nil || created.Session.ID == "") {
		err = errors.New("create answered no session")
	}
	if err != nil {
		switch {
		case !refused(err):
			// The answer may be lost though the session exists: find it by name and end it.
			p.rel.Record(ctx, record)
		case errors.Is(err, agentenv.ErrNotFound):
			err = fmt.Errorf("image %q not found: %w: %w", image, agentenv.ErrInvalid, err)
		}
		return nil, fmt.Errorf("tenki: create %s: %w", record, err)
	}
	sess := created.Session
	p.remember(sess.ID, created.DataPlaneEndpoint, created.Credential, created.RouteStatus)
	if sess.State != wire.StateRunning {
		sess, err = p.awaitRunning(cctx, sess.ID)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		p.rel.Release(ctx, created.Session.ID, record)
		return nil, fmt.Errorf("tenki: create %s: %w", record, ctxerr.Prefer(ctx, err))
	}
	log.Debug("session created", "session_id", sess.ID)
	return sess, nil
}

// awaitRunning polls GetSession until the session runs, as the SDKs do when a held create
// answered before that; a session that ends first is an error naming its reason.
func (p *Provider) awaitRunning(ctx context.Context, id string) (*wire.Session, error) {
	return cloudapi.Await(ctx, "session "+id, func(ctx context.Context) (*wire.Session, string, bool, error) {
		sess, err := p.session(ctx, id)
		switch {
		case err != nil:
			return nil, "", false, err
		case stopped(sess.State):
			return nil, "", true, fmt.Errorf("session %s %s during startup (%s): %w", id, sess.State, sess.TerminalError, agentenv.ErrGone)
		}
		return sess, string(sess.State), sess.State == wire.StateRunning, nil
	})
}

// session returns GetSession's answer; an unknown session is ErrNotFound.
func (p *Provider) session(ctx context.Context, id string) (*wire.Session, error) {
	if id == "" {
		return nil, fmt.Errorf("empty session id: %w", agentenv.ErrInvalid)
	}
	got, err := call(ctx, p, p.getSession, &wire.SessionID{SessionID: id})
	if err != nil {
		return nil, err
	}
	if got.Session == nil {
		return nil, fmt.Errorf("session %s: answered no session: %w", id, agentenv.ErrNotFound)
	}
	return got.Session, nil
}

// stopped reports whether a session in state s does not run and will not on its own: ended,
// paused or shut down from inside.
func stopped(s wire.SessionState) bool {
	switch s {
	case wire.StateTerminating, wire.StateTerminated, wire.StatePaused, wire.StatePausing, wire.StateUserShutdown:
		return true
	}
	return false
}

// sandbox converts Tenki's view of a session into agentenv's, without endpoints (which need a
// call: see endpoints).
func (p *Provider) sandbox(s *wire.Session) agentenv.Sandbox {
	labels := maps.Clone(s.Metadata)
	if labels == nil {
		labels = map[string]string{}
	}
	delete(labels, metaPorts)
	delete(labels, metaMode)
	sb := agentenv.Sandbox{ID: s.ID, Name: s.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: labels, Endpoints: map[string]string{}}
	if s.CreatedAt != nil {
		sb.Created = s.CreatedAt.UTC()
	}
	switch {
	case stopped(s.State):
		sb.State, sb.ExitCode = agentenv.SandboxExited, -1
	case s.State != wire.StateRunning:
		sb.State = agentenv.SandboxCreating
	}
	return sb
}

// endpoints fills sb's endpoints with the preview URLs of the ports Create exposed (as s's
// metadata lists them), through ListExposedPorts.
func (p *Provider) endpoints(ctx context.Context, s *wire.Session, sb *agentenv.Sandbox) error {
	if s.Metadata[metaPorts] == "" || sb.State != agentenv.SandboxRunning {
		return nil
	}
	got, err := call(ctx, p, p.listExposedPorts, &wire.SessionID{SessionID: s.ID})
	if err != nil {
		return fmt.Errorf("exposed ports of %s: %w", s.ID, err)
	}
	for _, e := range got.Ports {
		if e != nil && e.PreviewURL != "" {
			sb.Endpoints[strconv.Itoa(int(e.Port))] = e.PreviewURL
		}
	}
	return nil
}

// Get returns a live handle to session id, with its endpoints. An ended session (terminating or
// terminated) is both ErrGone and ErrNotFound (Tenki keeps it only as history, and it cannot be
// reattached); a paused or shut-down one (a bare sandbox whose command exited) ErrGone; one
// Tenki does not know ErrNotFound.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	s, err := p.session(ctx, id)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tenki: get %s: %w", id, err)
	}
	sb := p.sandbox(s)
	switch {
	case s.State.Ended():
		return sb, fmt.Errorf("tenki: get %s: %s (%s): %w: %w", id, s.State, s.TerminalError, agentenv.ErrGone, agentenv.ErrNotFound)
	case sb.State == agentenv.SandboxExited:
		return sb, fmt.Errorf("tenki: get %s: %s: %w", id, s.State, agentenv.ErrGone)
	}
	if err := p.endpoints(ctx, s, &sb); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tenki: get %s: %w", id, err)
	}
	return sb, nil
}

// Terminate ends session id by id (TerminateSession), with no connect to it. A session Tenki
// does not know counts as terminated, and so does one that has already ended: when the call
// fails, Get tells which.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("tenki: terminate: empty session id: %w", agentenv.ErrInvalid)
	}
	_, err := call(ctx, p, p.terminateSession, &wire.SessionID{SessionID: id})
	switch {
	case errors.Is(err, agentenv.ErrNotFound):
		err = nil
	case err != nil:
		s, gerr := p.session(ctx, id)
		if errors.Is(gerr, agentenv.ErrNotFound) || gerr == nil && s.State.Ended() {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("tenki: terminate %s: %w", id, err)
	}
	p.forget(id)
	p.log.Debug("terminated", "session_id", id)
	return nil
}

// List returns the sessions not yet ended that agentenv made (tagged "agentenv", their metadata
// naming a record equal to their name) and that carry every one of labels, with their
// endpoints. It reads every page of ListWorkspaceSandboxes for the tag and filters the labels
// here. A VM-mode session is listed as any other.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	var out []agentenv.Sandbox
	err := cloudapi.Pages(func(token string) (string, error) {
		page, err := call(ctx, p, p.listSessions, &wire.ListWorkspaceSandboxesRequest{PageSize: 100, PageToken: token, Tags: []string{Tag}})
		if err != nil {
			return "", err
		}
		for _, s := range page.Sessions {
			if s == nil || s.State.Ended() {
				continue
			}
			if rec, ok := s.Metadata[agentenv.LabelRecord]; !ok || rec != s.Name || !agentenv.MatchLabels(s.Metadata, labels) {
				continue
			}
			sb := p.sandbox(s)
			if err := p.endpoints(ctx, s, &sb); err != nil && !errors.Is(err, agentenv.ErrNotFound) && !errors.Is(err, agentenv.ErrGone) {
				return "", err
			}
			out = append(out, sb)
		}
		next := strings.TrimSpace(page.NextPageToken)
		if next == token && next != "" {
			return "", fmt.Errorf("page token %q did not advance: %w", next, agentenv.ErrUnavailable)
		}
		if len(page.Sessions) == 0 {
			next = ""
		}
		return next, nil
	})
	if err != nil {
		return nil, fmt.Errorf("tenki: list: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// expose publishes guest port of session id (ExposePort) and returns its preview URL.
func (p *Provider) expose(ctx context.Context, id string, port int) (string, error) {
	got, err := call(ctx, p, p.exposePort, &wire.ExposePortRequest{SessionID: id, Port: int32(port)})
	if err == nil && got.PreviewURL == "" {
		err = fmt.Errorf("answered no preview url")
	}
	if err != nil {
		return "", fmt.Errorf("expose port %d: %w", port, err)
	}
	return got.PreviewURL, nil
}

// Package providertest is the conformance suite every agentenv.Provider passes. A provider's
// test calls Run with a constructor and an image; Run checks the contracts written on
// agentenv.Provider and on the abilities it has (agentenv.AbilitiesOf): labels round trip, List
// finds by record, Terminate is idempotent and counts a finished sandbox as terminated, Get
// tells a finished sandbox from a missing one, a Create that is cancelled or refused leaves
// nothing listed; a decorator (agentenv.Intercept) keeps every ability; and each ability it
// declares works (private networks, volumes, exec, files). VM stacks are checked by the deploy tests of
// each VM provider, which run a whole env in one.
//
// Every subtest uses its own random record ids and terminates what it made in t.Cleanup.
//
// A cloud provider tested against an in-process emulator starts it with CloseAtEnd (the test
// fails if the emulator still runs a sandbox when it ends) and runs Run on it; its e2e test
// (build tag e2e) against the real cloud is RunLive with the key's environment variable, which
// fails, not skips, without the key.
package providertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
)

// Options describes the workload the suite runs in sandboxes.
type Options struct {
	Image   string   // image of every sandbox; required
	Command []string // serves HTTP 200 on "/" at Port until terminated; required
	Port    int      // the container port Command listens on; required

	// ExitCommand exits at once with status ExitCode (non-zero); required, for the subtest of
	// a sandbox whose process has finished.
	ExitCommand []string
	ExitCode    int

	// Labels are added to every sandbox and network the suite makes, so that the caller can
	// check for leftovers by them (dockertest.CheckNoLeftovers).
	Labels map[string]string

	// Wait bounds each wait for a sandbox to serve or to finish; default 30s.
	Wait time.Duration

	// FinishedUnlisted says the backend does not list a sandbox that finished on its own
	// (Modal lists running sandboxes only): the Exited subtest then wants List to return
	// nothing for it, instead of one exited sandbox. Get must still report ErrGone.
	FinishedUnlisted bool

	// NotProcesses says a sandbox is not a process (a database of a state store): nothing in
	// it serves HTTP and nothing ends on its own. The suite then checks that Endpoints name
	// Port but does not call them, and skips the Exited subtest; Command and ExitCommand are
	// still required, and ignored.
	NotProcesses bool

	// ExecCommand, run with Exec in a sandbox running Command, exits with ExitCode; default
	// ExitCommand. Used when the provider has agentenv.Execer.
	ExecCommand []string
}

// Run runs the conformance suite against the providers newProvider returns (one per subtest).
func Run(t *testing.T, newProvider func(t *testing.T) agentenv.Provider, opts Options) {
	if opts.Image == "" || len(opts.Command) == 0 || opts.Port == 0 || len(opts.ExitCommand) == 0 || opts.ExitCode == 0 {
		t.Fatalf("providertest: Options need Image, Command, Port, ExitCommand and a non-zero ExitCode: %+v", opts)
	}
	if opts.Wait == 0 {
		opts.Wait = 30 * time.Second
	}
	s := &suite{opts: opts}
	tests := []struct {
		name string
		fn   func(*testing.T, agentenv.Provider)
	}{
		{"Lifecycle", s.lifecycle},
		{"TerminateUnknown", s.terminateUnknown},
		{"Exited", s.exited},
		{"CreateAlreadyCancelled", s.createAlreadyCancelled},
		{"CreateCancelledMidway", s.createCancelledMidway},
		{"InvalidRecordLabel", s.invalidRecordLabel},
		{"Network", s.network},
		{"Image", s.image},
		{"Volume", s.volume},
		{"Abilities", s.abilities},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newProvider(t)) })
	}
}

type suite struct{ opts Options }

// NewID returns a fresh record id, "t-" and 16 hex digits.
func NewID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "t-" + hex.EncodeToString(b)
}

// spec returns a sandbox spec for record id running command, with the agentenv labels.
func (s *suite) spec(id string, command []string) agentenv.SandboxSpec {
	return agentenv.SandboxSpec{
		Name:    id,
		Image:   s.opts.Image,
		Command: command,
		Labels:  s.labels(id),
		Ports:   []int{s.opts.Port},
		Expires: time.Now().Add(time.Hour),
	}
}

func (s *suite) labels(id string) map[string]string {
	l := map[string]string{
		agentenv.LabelRecord:     id,
		agentenv.LabelRun:        "providertest",
		agentenv.LabelDeployment: "",
		agentenv.LabelRole:       "conformance",
		"example.com/team":       "agentenv",
	}
	maps.Copy(l, s.opts.Labels)
	return l
}

// terminateAtEnd terminates id when t ends, whatever the test did.
func terminateAtEnd(t *testing.T, p agentenv.Provider, id string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Terminate(ctx, id); err != nil {
			t.Errorf("cleanup: Terminate(%s) = %v", id, err)
		}
	})
}

// listRecord returns what p lists under record id.
func listRecord(t *testing.T, p agentenv.Provider, id string) []agentenv.Sandbox {
	t.Helper()
	sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: id})
	if err != nil {
		t.Fatalf("List(record=%s) = %v", id, err)
	}
	return sbs
}

func (s *suite) lifecycle(t *testing.T, p agentenv.Provider) {
	ctx := t.Context()
	id := NewID()
	terminateAtEnd(t, p, id)
	spec := s.spec(id, s.opts.Command)

	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create(%s) = %v", id, err)
	}
	if sb.ID == "" || sb.Name != id || sb.Provider != p.Name() || sb.State != agentenv.SandboxRunning {
		t.Errorf("Create(%s) = {ID:%q Name:%q Provider:%q State:%q}, want an ID, Name %q, Provider %q, running",
			id, sb.ID, sb.Name, sb.Provider, sb.State, id, p.Name())
	}

	sbs := listRecord(t, p, id)
	if len(sbs) != 1 || sbs[0].ID != sb.ID {
		t.Fatalf("List(record=%s) = %v, want exactly the sandbox %s", id, sbs, sb.ID)
	}
	for k, v := range spec.Labels {
		if got, ok := sbs[0].Labels[k]; !ok || got != v {
			t.Errorf("List: label %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	byTwo, err := p.List(ctx, map[string]string{agentenv.LabelRecord: id, agentenv.LabelRole: "conformance"})
	if err != nil || len(byTwo) != 1 {
		t.Errorf("List(record, role) = %v, %v; want the sandbox", byTwo, err)
	}
	other, err := p.List(ctx, map[string]string{agentenv.LabelRecord: id, agentenv.LabelRole: "not-this"})
	if err != nil || len(other) != 0 {
		t.Errorf("List(record, other role) = %v, %v; want none", other, err)
	}

	got, err := p.Get(ctx, sb.ID)
	if err != nil {
		t.Fatalf("Get(%s) = %v", sb.ID, err)
	}
	if got.State != agentenv.SandboxRunning {
		t.Errorf("Get(%s).State = %q, want running", sb.ID, got.State)
	}
	port := strconv.Itoa(s.opts.Port)
	for name, m := range map[string]map[string]string{"Create": sb.Endpoints, "Get": got.Endpoints, "List": sbs[0].Endpoints} {
		if m[port] == "" {
			t.Errorf("%s: Endpoints = %v, want one for port %s", name, m, port)
		}
	}
	if ep := sb.Endpoints[port]; ep != "" && !s.opts.NotProcesses {
		s.checkServes(t, ep)
	}

	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Fatalf("Terminate(%s) = %v", sb.ID, err)
	}
	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Errorf("Terminate(%s) again = %v, want nil", sb.ID, err)
	}
	if _, err := p.Get(ctx, sb.ID); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get(%s) after Terminate = %v, want ErrNotFound", sb.ID, err)
	}
	if sbs := listRecord(t, p, id); len(sbs) != 0 {
		t.Errorf("List(record=%s) after Terminate = %v, want none", id, sbs)
	}
}

// checkServes waits until the endpoint answers HTTP 200 on "/".
func (s *suite) checkServes(t *testing.T, endpoint string) {
	t.Helper()
	url := endpoint
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	deadline := time.Now().Add(s.opts.Wait)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("GET %s/: %s, want 200 within %v", url, last, s.opts.Wait)
}

func (s *suite) terminateUnknown(t *testing.T, p agentenv.Provider) {
	id := NewID()
	if err := p.Terminate(t.Context(), id); err != nil {
		t.Errorf("Terminate(unknown %s) = %v, want nil", id, err)
	}
	if _, err := p.Get(t.Context(), id); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get(unknown %s) = %v, want ErrNotFound", id, err)
	}
}

func (s *suite) exited(t *testing.T, p agentenv.Provider) {
	if s.opts.NotProcesses {
		t.Skipf("%s: a sandbox is not a process and does not finish on its own", p.Name())
	}
	ctx := t.Context()
	id := NewID()
	terminateAtEnd(t, p, id)
	spec := s.spec(id, s.opts.ExitCommand)
	spec.Ports = nil
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create(%s) = %v", id, err)
	}
	deadline := time.Now().Add(s.opts.Wait)
	for {
		_, err = p.Get(ctx, sb.ID)
		if errors.Is(err, agentenv.ErrGone) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !errors.Is(err, agentenv.ErrGone) {
		t.Fatalf("Get(%s) of a finished sandbox = %v, want ErrGone", sb.ID, err)
	}
	sbs := listRecord(t, p, id)
	if s.opts.FinishedUnlisted {
		if len(sbs) != 0 {
			t.Errorf("List(record=%s) = %+v, want none: the provider says finished sandboxes are not listed", id, sbs)
		}
	} else if len(sbs) != 1 || sbs[0].State != agentenv.SandboxExited || sbs[0].ExitCode != s.opts.ExitCode {
		t.Errorf("List(record=%s) = %+v, want one exited sandbox with exit code %d", id, sbs, s.opts.ExitCode)
	}
	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Errorf("Terminate(%s) of a finished sandbox = %v, want nil", sb.ID, err)
	}
	if sbs := listRecord(t, p, id); len(sbs) != 0 {
		t.Errorf("List(record=%s) after Terminate = %v, want none", id, sbs)
	}
}

func (s *suite) createAlreadyCancelled(t *testing.T, p agentenv.Provider) {
	id := NewID()
	terminateAtEnd(t, p, id)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.Create(ctx, s.spec(id, s.opts.Command)); !errors.Is(err, context.Canceled) {
		t.Errorf("Create(%s) with a cancelled context = %v, want context.Canceled", id, err)
	}
	if sbs := listRecord(t, p, id); len(sbs) != 0 {
		t.Errorf("List(record=%s) after a cancelled Create = %v, want none", id, sbs)
	}
}

func (s *suite) createCancelledMidway(t *testing.T, p agentenv.Provider) {
	for _, after := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			id := NewID()
			terminateAtEnd(t, p, id)
			ctx, cancel := context.WithCancel(t.Context())
			timer := time.AfterFunc(after, cancel)
			defer timer.Stop()
			sb, err := p.Create(ctx, s.spec(id, s.opts.Command))
			cancel()
			if err == nil {
				// Create won the race; what it made is ours to remove.
				if err := p.Terminate(t.Context(), sb.ID); err != nil {
					t.Errorf("Terminate(%s) = %v", sb.ID, err)
				}
				return
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Create(%s) cancelled after %v = %v, want context.Canceled", id, after, err)
			}
			if sbs := listRecord(t, p, id); len(sbs) != 0 {
				t.Errorf("List(record=%s) after Create cancelled at %v = %v, want none", id, after, sbs)
			}
		})
	}
}

func (s *suite) invalidRecordLabel(t *testing.T, p agentenv.Provider) {
	id, other := NewID(), NewID()
	terminateAtEnd(t, p, id)
	terminateAtEnd(t, p, other)
	missing := s.spec(id, s.opts.Command)
	delete(missing.Labels, agentenv.LabelRecord)
	mismatched := s.spec(id, s.opts.Command)
	mismatched.Labels[agentenv.LabelRecord] = other
	malformed := s.spec("Bad Id!", s.opts.Command)
	for name, spec := range map[string]agentenv.SandboxSpec{"missing": missing, "mismatched": mismatched, "malformed": malformed} {
		if _, err := p.Create(t.Context(), spec); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("Create with a %s record label = %v, want ErrInvalid", name, err)
		}
	}
	for _, rid := range []string{id, other, "Bad Id!"} {
		if sbs := listRecord(t, p, rid); len(sbs) != 0 {
			t.Errorf("List(record=%s) after refused Creates = %v, want none", rid, sbs)
		}
	}
}

func (s *suite) network(t *testing.T, p agentenv.Provider) {
	// The abilities decide, not the type: one type may serve providers of both kinds (modal
	// and modal_vm), and only those that declare private networks promise them.
	if agentenv.AbilitiesOf(p).Networker == nil {
		t.Logf("%s has no private networks", p.Name())
		return
	}
	nw := agentenv.AbilitiesOf(p).Networker
	ctx := t.Context()
	netID, id := NewID(), NewID()
	terminateAtEnd(t, p, id)
	terminateAtEnd(t, p, netID)

	bad := agentenv.NetworkSpec{Name: netID, Labels: map[string]string{agentenv.LabelRecord: id}}
	if _, err := nw.CreateNetwork(ctx, bad); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("CreateNetwork with a mismatched record label = %v, want ErrInvalid", err)
	}
	net, err := nw.CreateNetwork(ctx, agentenv.NetworkSpec{Name: netID, Labels: s.labels(netID)})
	if err != nil {
		t.Fatalf("CreateNetwork(%s) = %v", netID, err)
	}
	if sbs := listRecord(t, p, net.ID); len(sbs) != 1 || sbs[0].State != agentenv.SandboxRunning {
		t.Errorf("List(record=%s) = %v, want the network, running", netID, sbs)
	}
	spec := s.spec(id, s.opts.Command)
	spec.Network, spec.Aliases = net.ID, []string{"svc"}
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create(%s) on network %s = %v", id, net.ID, err)
	}
	if _, err := p.Get(ctx, sb.ID); err != nil {
		t.Errorf("Get(%s) = %v", sb.ID, err)
	}
	// The network goes first, while the sandbox is still attached to it.
	if err := p.Terminate(ctx, net.ID); err != nil {
		t.Errorf("Terminate(network %s) with a sandbox attached = %v, want nil", net.ID, err)
	}
	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Errorf("Terminate(%s) = %v", sb.ID, err)
	}
	for _, rid := range []string{netID, id} {
		if sbs := listRecord(t, p, rid); len(sbs) != 0 {
			t.Errorf("List(record=%s) after Terminate = %v, want none", rid, sbs)
		}
	}
}

// image checks, where p builds images (agentenv.Imager), that an image is found by its record
// label, runs with its files in a sandbox, refuses a second build of its name, and is gone
// after Terminate, which is idempotent.
func (s *suite) image(t *testing.T, p agentenv.Provider) {
	im := agentenv.AbilitiesOf(p).Imager
	if im == nil {
		t.Logf("%s builds no images", p.Name())
		return
	}
	ctx := t.Context()
	imgID, id := NewID(), NewID()
	terminateAtEnd(t, p, id)
	terminateAtEnd(t, p, imgID)
	const file = "/agentenv-conformance/image.txt"
	want := []byte("built by providertest\n")
	spec := agentenv.ImageSpec{Name: imgID, Base: s.opts.Image, Files: map[string][]byte{file: want}, Labels: map[string]string{agentenv.LabelRecord: id}}
	if _, err := im.CreateImage(ctx, spec); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("CreateImage with a mismatched record label = %v, want ErrInvalid", err)
	}
	spec.Labels = s.labels(imgID)
	img, err := im.CreateImage(ctx, spec)
	if err != nil {
		t.Fatalf("CreateImage(%s) = %v", imgID, err)
	}
	if img.Image == "" {
		t.Errorf("CreateImage(%s) returned no image reference", imgID)
	}
	if sbs := listRecord(t, p, imgID); len(sbs) != 1 || sbs[0].State != agentenv.SandboxRunning {
		t.Errorf("List(record=%s) = %v, want the image, running", imgID, sbs)
	}
	if _, err := im.CreateImage(ctx, spec); !errors.Is(err, agentenv.ErrConflict) {
		t.Errorf("CreateImage of a name in use = %v, want ErrConflict", err)
	}
	run := s.spec(id, s.opts.Command)
	run.Image = img.Image
	sb, err := p.Create(ctx, run)
	if err != nil {
		t.Fatalf("Create(%s) from image %s = %v", id, img.Image, err)
	}
	if f := agentenv.AbilitiesOf(p).Files; f != nil {
		if got, err := f.ReadFile(ctx, sb.ID, file); err != nil || string(got) != string(want) {
			t.Errorf("ReadFile(%s) in a sandbox of the image = %q, %v; want %q", file, got, err, want)
		}
	}
	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Errorf("Terminate(%s) = %v", sb.ID, err)
	}
	for range 2 {
		if err := p.Terminate(ctx, img.ID); err != nil {
			t.Errorf("Terminate(image %s) = %v, want nil", img.ID, err)
		}
	}
	if sbs := listRecord(t, p, imgID); len(sbs) != 0 {
		t.Errorf("List(record=%s) after Terminate = %v, want none", imgID, sbs)
	}
	run = s.spec(NewID(), s.opts.Command)
	run.Image = img.Image
	if _, err := p.Create(ctx, run); err == nil {
		p.Terminate(ctx, run.Name) //nolint:errcheck // the error below says what matters
		t.Errorf("Create from a terminated image = nil error, want one")
	}
}

// volume checks, where p has volumes (agentenv.Volumer), that a volume is found by its record
// label, refuses a second create of its name, shares what one sandbox writes into it with
// another that mounts it (read-only) where p has Files, and is gone after Terminate, which is
// idempotent; and that a mount of a volume that does not exist is ErrInvalid, leaving nothing.
func (s *suite) volume(t *testing.T, p agentenv.Provider) {
	vo := agentenv.AbilitiesOf(p).Volumer
	if vo == nil {
		t.Logf("%s has no volumes", p.Name())
		return
	}
	ctx := t.Context()
	volID, writer, reader, stray := NewID(), NewID(), NewID(), NewID()
	for _, id := range []string{writer, reader, stray, volID} {
		terminateAtEnd(t, p, id)
	}
	bad := agentenv.VolumeSpec{Name: volID, Labels: map[string]string{agentenv.LabelRecord: writer}}
	if _, err := vo.CreateVolume(ctx, bad); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("CreateVolume with a mismatched record label = %v, want ErrInvalid", err)
	}
	spec := agentenv.VolumeSpec{Name: volID, Labels: s.labels(volID)}
	vol, err := vo.CreateVolume(ctx, spec)
	if err != nil {
		t.Fatalf("CreateVolume(%s) = %v", volID, err)
	}
	if sbs := listRecord(t, p, volID); len(sbs) != 1 || sbs[0].State != agentenv.SandboxRunning {
		t.Errorf("List(record=%s) = %v, want the volume, running", volID, sbs)
	}
	if _, err := vo.CreateVolume(ctx, spec); !errors.Is(err, agentenv.ErrConflict) {
		t.Errorf("CreateVolume of a name in use = %v, want ErrConflict", err)
	}
	missing := s.spec(stray, s.opts.Command)
	missing.Mounts = []agentenv.Mount{{Volume: "t-missing-" + volID, Path: "/agentenv-volume"}}
	if _, err := p.Create(ctx, missing); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Create mounting a volume that does not exist = %v, want ErrInvalid", err)
	}
	if sbs := listRecord(t, p, stray); len(sbs) != 0 {
		t.Errorf("List(record=%s) after a refused Create = %v, want none", stray, sbs)
	}
	w := s.spec(writer, s.opts.Command)
	w.Mounts = []agentenv.Mount{{Volume: vol.ID, Path: "/agentenv-volume"}}
	wsb, err := p.Create(ctx, w)
	if err != nil {
		t.Fatalf("Create(%s) mounting %s = %v", writer, vol.ID, err)
	}
	r := s.spec(reader, s.opts.Command)
	r.Mounts = []agentenv.Mount{{Volume: vol.ID, Path: "/shared", ReadOnly: true}}
	rsb, err := p.Create(ctx, r)
	if err != nil {
		t.Fatalf("Create(%s) mounting %s read-only = %v", reader, vol.ID, err)
	}
	if f := agentenv.AbilitiesOf(p).Files; f != nil {
		want := []byte("shared by providertest\n")
		if err := f.WriteFile(ctx, wsb.ID, "/agentenv-volume/shared.txt", want); err != nil {
			t.Fatalf("WriteFile into the volume = %v", err)
		}
		if got, err := f.ReadFile(ctx, rsb.ID, "/shared/shared.txt"); err != nil || string(got) != string(want) {
			t.Errorf("ReadFile in the other sandbox mounting the volume = %q, %v; want %q", got, err, want)
		}
	}
	for _, id := range []string{wsb.ID, rsb.ID} {
		if err := p.Terminate(ctx, id); err != nil {
			t.Errorf("Terminate(%s) = %v", id, err)
		}
	}
	for range 2 {
		if err := p.Terminate(ctx, vol.ID); err != nil {
			t.Errorf("Terminate(volume %s) = %v, want nil", vol.ID, err)
		}
	}
	for _, rid := range []string{volID, writer, reader} {
		if sbs := listRecord(t, p, rid); len(sbs) != 0 {
			t.Errorf("List(record=%s) after Terminate = %v, want none", rid, sbs)
		}
	}
}

// abilities checks that a decorator keeps exactly p's abilities, and that exec and files, where
// p has them, do what their contracts say.
func (s *suite) abilities(t *testing.T, p agentenv.Provider) {
	have := agentenv.AbilitiesOf(p)
	pass := func(ctx context.Context, _ string, call func(context.Context) error) error { return call(ctx) }
	if got, want := agentenv.AbilitiesOf(agentenv.Intercept(p, pass)).List(), have.List(); !slices.Equal(got, want) {
		t.Errorf("abilities through a decorator = %v, want %v", got, want)
	}
	t.Logf("%s has %v", p.Name(), have.List())
	if have.Execer == nil && have.Files == nil {
		return
	}
	ctx := t.Context()
	id := NewID()
	terminateAtEnd(t, p, id)
	sb, err := p.Create(ctx, s.spec(id, s.opts.Command))
	if err != nil {
		t.Fatalf("Create(%s) = %v", id, err)
	}
	if x := have.Execer; x != nil {
		argv := s.opts.ExecCommand
		if len(argv) == 0 {
			argv = s.opts.ExitCommand
		}
		res, err := x.Exec(ctx, sb.ID, argv)
		if err != nil || res.ExitCode != s.opts.ExitCode {
			t.Errorf("Exec(%v) = exit %d, %v; want exit %d and no error", argv, res.ExitCode, err, s.opts.ExitCode)
		}
		if _, err := x.Exec(ctx, "t-missing-"+id, argv); err == nil {
			t.Errorf("Exec in a sandbox that does not exist = nil error, want one")
		}
	}
	if f := have.Files; f != nil {
		const file = "/tmp/agentenv-conformance/probe.txt"
		want := []byte("written by providertest\n")
		if err := f.WriteFile(ctx, sb.ID, file, want); err != nil {
			t.Fatalf("WriteFile(%s) = %v", file, err)
		}
		got, err := f.ReadFile(ctx, sb.ID, file)
		if err != nil || string(got) != string(want) {
			t.Errorf("ReadFile(%s) = %q, %v; want %q", file, got, err, want)
		}
		if _, err := f.ReadFile(ctx, sb.ID, "/tmp/agentenv-conformance/absent.txt"); !errors.Is(err, agentenv.ErrNotFound) {
			t.Errorf("ReadFile of a missing file = %v, want ErrNotFound", err)
		}
	}
	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Errorf("Terminate(%s) = %v", sb.ID, err)
	}
}

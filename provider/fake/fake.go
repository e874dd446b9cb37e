// Package fake is an in-memory agentenv.Provider for unit tests. It is a stand-in for a real
// backend, not a mock: it assigns ids, honours labels, keeps exited sandboxes until they are
// terminated, hosts VM stacks, keeps files, and reports what is still alive, so that tests can
// assert nothing leaked. It has every optional ability unless told otherwise (Without) and
// passes the provider conformance suite. Faults (errors, hangs, lost responses) are injected by
// wrapping it with package internal/fault.
package fake

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/buildctx"
)

// Provider is an in-memory provider. The zero value is not usable; call New.
type Provider struct {
	name    string
	without map[agentenv.Ability]bool

	mu      sync.Mutex
	boxes   map[string]*agentenv.Sandbox // by id
	files   map[string]map[string][]byte // sandbox id -> path -> content
	inVM    map[string]map[string]bool   // VM id -> names of the containers of its stack
	servers map[string][]*http.Server    // sandbox id -> what its published ports answer
	images  map[string]map[string][]byte // image reference -> the files it adds to its base
	builds  map[string]string            // image reference -> the digest of the build it is of
	volumes map[string]map[string][]byte // volume id -> path within it -> content
	mounts  map[string][]agentenv.Mount  // sandbox id -> the volumes mounted into it
	seq     int
	calls   map[string]int
	// buildInVM: Capabilities say BuildInVM, and Create takes a spec with Build (BuildInVM).
	buildInVM bool
}

var (
	_ agentenv.Provider     = (*Provider)(nil)
	_ agentenv.Abler        = (*Provider)(nil)
	_ agentenv.Networker    = (*Provider)(nil)
	_ agentenv.VMHost       = (*Provider)(nil)
	_ agentenv.Execer       = (*Provider)(nil)
	_ agentenv.Attacher     = (*Provider)(nil)
	_ agentenv.Files        = (*Provider)(nil)
	_ agentenv.ImageChecker = (*Provider)(nil)
	_ agentenv.LogReader    = (*Provider)(nil)
	_ agentenv.Imager       = (*Provider)(nil)
	_ agentenv.Volumer      = (*Provider)(nil)
)

// New returns an empty fake provider called name, with every ability but those listed in
// without (for tests of callers that must cope with a provider that lacks one).
func New(name string, without ...agentenv.Ability) *Provider {
	p := &Provider{
		name:    name,
		without: map[agentenv.Ability]bool{},
		boxes:   make(map[string]*agentenv.Sandbox),
		files:   make(map[string]map[string][]byte),
		inVM:    make(map[string]map[string]bool),
		servers: make(map[string][]*http.Server),
		images:  make(map[string]map[string][]byte),
		builds:  make(map[string]string),
		volumes: make(map[string]map[string][]byte),
		mounts:  make(map[string][]agentenv.Mount),
		calls:   make(map[string]int),
	}
	for _, a := range without {
		p.without[a] = true
	}
	return p
}

// Name implements agentenv.Provider.
func (p *Provider) Name() string { return p.name }

// Capabilities implements agentenv.Provider: it lists by label and runs on this machine, and
// builds in a sandbox's VM once BuildInVM said so.
func (p *Provider) Capabilities() agentenv.Capabilities {
	p.mu.Lock()
	defer p.mu.Unlock()
	return agentenv.Capabilities{OnThisMachine: true, ListByLabel: true, BuildInVM: p.buildInVM}
}

// BuildInVM makes p a provider that builds in a bare sandbox's VM (Capabilities.BuildInVM):
// Create of a spec with Build builds nothing, it records the build's digest (see Built) under
// the reference it returns as Sandbox.Image, which goes with the sandbox. A context it cannot
// digest is ErrInvalid. It returns p.
func (p *Provider) BuildInVM() *Provider {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buildInVM = true
	return p
}

// Abilities implements agentenv.Abler: every ability but those New was told to leave out.
func (p *Provider) Abilities() agentenv.Abilities {
	var a agentenv.Abilities
	if !p.without[agentenv.AbilityNetworks] {
		a.Networker = p
	}
	if !p.without[agentenv.AbilityVMs] {
		a.VMHost = p
	}
	if !p.without[agentenv.AbilityExec] {
		a.Execer = p
	}
	if !p.without[agentenv.AbilityAttach] {
		a.Attacher = p
	}
	if !p.without[agentenv.AbilityFiles] {
		a.Files = p
	}
	if !p.without[agentenv.AbilityImages] {
		a.ImageChecker = p
	}
	if !p.without[agentenv.AbilityLogs] {
		a.LogReader = p
	}
	if !p.without[agentenv.AbilityImageBuild] {
		a.Imager = p
	}
	if !p.without[agentenv.AbilityVolumes] {
		a.Volumer = p
	}
	return a
}

// Create implements agentenv.Provider. It fails with ErrInvalid for an image named "missing", an
// image of its own (CreateImage) that is gone, a mount of a volume it does not have, and a spec
// whose record label does not match its name. A sandbox of an image of its own starts with that
// image's files; its mounts' files are their volumes' (ReadFile and WriteFile).
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	p.count("create")
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create %s: %w", spec.Name, err)
	}
	if err := checkName(spec.Name, spec.Labels); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create: %w", err)
	}
	digest := ""
	if spec.Build != nil {
		p.mu.Lock()
		on := p.buildInVM
		p.mu.Unlock()
		if !on {
			return agentenv.Sandbox{}, fmt.Errorf("fake: create %s: no build in a vm here: %w", spec.Name, agentenv.ErrInvalid)
		}
		d, err := buildctx.Digest(*spec.Build)
		if err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("fake: create %s: %w", spec.Name, err)
		}
		digest = d
	} else if err := p.image(spec.Image); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create %s: %w", spec.Name, err)
	}
	if p.without[agentenv.AbilityVolumes] && len(spec.Mounts) > 0 {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create %s: mounts: no volumes: %w", spec.Name, agentenv.ErrInvalid)
	}
	p.mu.Lock()
	for i, m := range spec.Mounts {
		if _, ok := p.volumes[m.Volume]; !ok {
			p.mu.Unlock()
			return agentenv.Sandbox{}, fmt.Errorf("fake: create %s: mounts[%d]: volume %q not found: %w", spec.Name, i, m.Volume, agentenv.ErrInvalid)
		}
	}
	p.mu.Unlock()
	sb := p.add(spec.Name, spec.Labels, spec.Ports)
	p.mu.Lock()
	if files, ok := p.images[spec.Image]; ok {
		p.files[sb.ID] = maps.Clone(files)
	}
	if len(spec.Mounts) > 0 {
		p.mounts[sb.ID] = slices.Clone(spec.Mounts)
	}
	if spec.Build != nil {
		sb.Image = imagePrefix + "vm-" + spec.Name
		p.boxes[sb.ID].Image = sb.Image
		p.images[sb.Image] = map[string][]byte{}
		p.builds[sb.Image] = digest
	}
	p.mu.Unlock()
	if code, ok := exitCode(spec.Command); ok {
		p.Kill(sb.ID, code)
		sb.State, sb.ExitCode = agentenv.SandboxExited, code
	}
	sb.ImageNote = pinnedNote(spec)
	return sb, nil
}

// pinnedNote is the fake's Sandbox.ImageNote: it pulls nothing, and says it ran a pinned image
// as a provider that pulls would.
func pinnedNote(spec agentenv.SandboxSpec) string {
	if spec.Pinned == "" {
		return ""
	}
	return "pinned " + spec.Pinned
}

// validName is what a record id must look like, as on the real backends.
var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// checkName refuses a name that a real backend would refuse, or whose record label differs.
func checkName(name string, labels map[string]string) error {
	if !validName.MatchString(name) || labels[agentenv.LabelRecord] != name {
		return fmt.Errorf("%q: want a valid name equal to the record label: %w", name, agentenv.ErrInvalid)
	}
	return nil
}

// exitCode reports whether argv is "exit N" (after at most one leading path element, such as
// ["/agentenv", "exit", "3"]), the command a fake sandbox runs to finish at once.
func exitCode(argv []string) (int, bool) {
	for i := 0; i+1 < len(argv) && i < 2; i++ {
		if argv[i] == "exit" {
			if n, err := strconv.Atoi(argv[i+1]); err == nil {
				return n, true
			}
		}
	}
	return 0, false
}

// CreateNetwork implements agentenv.Networker.
func (p *Provider) CreateNetwork(ctx context.Context, spec agentenv.NetworkSpec) (agentenv.Sandbox, error) {
	p.count("create_network")
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create network %s: %w", spec.Name, err)
	}
	if err := checkName(spec.Name, spec.Labels); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create network: %w", err)
	}
	// A network's id is its record id, as on the real backends, where sandboxes name it.
	sb := p.add(spec.Name, spec.Labels, nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	box := p.boxes[sb.ID]
	delete(p.boxes, sb.ID)
	box.ID = spec.Name
	p.boxes[box.ID] = box
	return *box, nil
}

// CreateVolume implements agentenv.Volumer: the volume is a store of files that the sandboxes
// mounting it read and write. Its id is its record id, as a network's; a name in use is
// ErrConflict.
func (p *Provider) CreateVolume(ctx context.Context, spec agentenv.VolumeSpec) (agentenv.Sandbox, error) {
	p.count("create_volume")
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create volume %s: %w", spec.Name, err)
	}
	if err := checkName(spec.Name, spec.Labels); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create volume: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, taken := p.boxes[spec.Name]; taken {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create volume %s: name in use: %w", spec.Name, agentenv.ErrConflict)
	}
	p.volumes[spec.Name] = map[string][]byte{}
	box := &agentenv.Sandbox{
		ID: spec.Name, Name: spec.Name, Provider: p.name, State: agentenv.SandboxRunning,
		Labels: maps.Clone(spec.Labels), Endpoints: map[string]string{}, Created: time.Now(),
	}
	p.boxes[spec.Name] = box
	return *box, nil
}

// Volumes returns the ids of the volumes CreateVolume made that still exist, sorted.
func (p *Provider) Volumes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.volumes))
}

// where returns the store that file of sandbox id is in (its own, or a mounted volume's) and
// its key there, and whether the mount is read-only; p.mu is held.
func (p *Provider) where(id, file string) (store map[string][]byte, key string, readOnly bool) {
	file = path.Clean(file)
	for _, m := range p.mounts[id] {
		mp := path.Clean(m.Path)
		if rel, ok := strings.CutPrefix(file, mp+"/"); ok {
			if v, ok := p.volumes[m.Volume]; ok {
				return v, rel, m.ReadOnly
			}
		}
	}
	if p.files[id] == nil {
		p.files[id] = map[string][]byte{}
	}
	return p.files[id], file, false
}

// imagePrefix starts the references of the images CreateImage builds.
const imagePrefix = "fake.local/"

// CreateImage implements agentenv.Imager: the image is a record of the files it adds to its
// base, which a sandbox created from its reference starts with. Its id is its record id, as a
// network's; a base named "missing" is not there, and a name in use is ErrConflict. With
// spec.Build set, it builds nothing: it records the build's digest (see Built), and a context
// it cannot digest (a folder that does not exist) is ErrInvalid.
func (p *Provider) CreateImage(ctx context.Context, spec agentenv.ImageSpec) (agentenv.Sandbox, error) {
	p.count("create_image")
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create image %s: %w", spec.Name, err)
	}
	if err := checkName(spec.Name, spec.Labels); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create image: %w", err)
	}
	digest := ""
	if spec.Build != nil {
		d, err := buildctx.Digest(*spec.Build)
		if err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("fake: create image %s: %w", spec.Name, err)
		}
		digest = d
	} else if err := p.image(spec.Base); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create image %s: base: %w", spec.Name, err)
	}
	ref := imagePrefix + spec.Name
	p.mu.Lock()
	_, taken := p.boxes[spec.Name]
	if !taken {
		if spec.Build != nil {
			p.builds[ref] = digest
		}
		p.images[ref] = maps.Clone(spec.Files)
		p.boxes[spec.Name] = &agentenv.Sandbox{
			ID: spec.Name, Name: spec.Name, Provider: p.name, State: agentenv.SandboxRunning,
			Labels: maps.Clone(spec.Labels), Endpoints: map[string]string{}, Created: time.Now(), Image: ref,
		}
	}
	p.mu.Unlock()
	if taken {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create image %s: name in use: %w", spec.Name, agentenv.ErrConflict)
	}
	return p.Get(ctx, spec.Name)
}

// Built returns the digest (buildctx.Digest) of the build that image ref is of, if it is an
// image built from a Dockerfile that still exists.
func (p *Provider) Built(ref string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.images[ref]; !ok {
		return "", false
	}
	d, ok := p.builds[ref]
	return d, ok
}

// Images returns the references of the images CreateImage built that still exist, sorted.
func (p *Provider) Images() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.images))
}

func (p *Provider) add(name string, labels map[string]string, ports []int) agentenv.Sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	sb := &agentenv.Sandbox{
		ID:        fmt.Sprintf("%s-%d", p.name, p.seq),
		Name:      name,
		Provider:  p.name,
		State:     agentenv.SandboxRunning,
		Labels:    maps.Clone(labels),
		Endpoints: map[string]string{},
		Created:   time.Now(),
	}
	for _, port := range ports {
		addr, srv := serve()
		sb.Endpoints[strconv.Itoa(port)] = addr
		p.servers[sb.ID] = append(p.servers[sb.ID], srv)
	}
	p.boxes[sb.ID] = sb
	return *sb
}

// serve starts what a sandbox's published port answers: an HTTP server on a loopback port
// that says 200 to every request. It returns its address and the server, closed with the
// sandbox.
func serve() (string, *http.Server) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("fake: listen on loopback: %v", err)) // the machine cannot run tests
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "fake sandbox") }),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go srv.Serve(l) //nolint:errcheck // ends with ErrServerClosed when the sandbox goes
	return l.Addr().String(), srv
}

// stop closes the servers of sandbox id; p.mu is held.
func (p *Provider) stop(id string) {
	for _, srv := range p.servers[id] {
		srv.Close()
	}
	delete(p.servers, id)
}

// Get implements agentenv.Provider.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	p.count("get")
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, ok := p.boxes[id]
	if !ok {
		return agentenv.Sandbox{}, fmt.Errorf("fake: get %s: %w", id, agentenv.ErrNotFound)
	}
	if sb.State != agentenv.SandboxRunning {
		return agentenv.Sandbox{}, fmt.Errorf("fake: get %s: %w", id, agentenv.ErrGone)
	}
	return *sb, nil
}

// Terminate implements agentenv.Provider.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	p.count("terminate")
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fake: terminate %s: %w", id, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop(id)
	return nil
}

// drop forgets sandbox id and what belongs to it: its files and, for a VM, its stack (whose
// containers carry the VM's record label, as on a real backend).
func (p *Provider) drop(id string) {
	sb, ok := p.boxes[id]
	p.stop(id)
	delete(p.boxes, id)
	delete(p.files, id)
	delete(p.mounts, id)
	delete(p.volumes, id)
	delete(p.inVM, id)
	if ok && sb.Image != "" {
		delete(p.images, sb.Image)
		delete(p.builds, sb.Image)
	}
	if !ok || sb.Labels[labelVM] != "" {
		return
	}
	for cid, c := range p.boxes {
		if c.Labels[labelVM] == id {
			p.stop(cid)
			delete(p.boxes, cid)
		}
	}
}

// List implements agentenv.Provider.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	p.count("list")
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: list: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []agentenv.Sandbox
	for _, sb := range p.boxes {
		if matches(sb.Labels, labels) {
			out = append(out, *sb)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Exec implements agentenv.Execer: it echoes argv and exits 0, except that "exit N" (after any
// leading path element, such as ["/agentenv", "exit", "3"]) exits N.
func (p *Provider) Exec(ctx context.Context, id string, argv []string) (agentenv.ExecResult, error) {
	p.count("exec")
	if _, err := p.Get(ctx, id); err != nil {
		return agentenv.ExecResult{}, err
	}
	if code, ok := exitCode(argv); ok {
		return agentenv.ExecResult{ExitCode: code}, nil
	}
	return agentenv.ExecResult{Stdout: fmt.Appendf(nil, "%v", argv)}, nil
}

// Attach implements agentenv.Attacher: whatever argv, the process copies its input to its
// output (as cat does) until its input ends or the stream is closed.
func (p *Provider) Attach(ctx context.Context, id string, argv []string) (agentenv.Stream, error) {
	p.count("attach")
	if _, err := p.Get(ctx, id); err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("fake: attach %s: empty command: %w", id, agentenv.ErrInvalid)
	}
	r, w := io.Pipe()
	return &echoStream{r: r, w: w, done: make(chan struct{})}, nil
}

// echoStream is the fake's attached process: what is written is read back.
type echoStream struct {
	r    *io.PipeReader
	w    *io.PipeWriter
	done chan struct{}
	once sync.Once
}

func (s *echoStream) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	if err != nil {
		s.end()
	}
	return n, err
}
func (s *echoStream) Write(b []byte) (int, error) { return s.w.Write(b) }
func (s *echoStream) CloseWrite() error           { return s.w.Close() }
func (s *echoStream) Done() <-chan struct{}       { return s.done }
func (s *echoStream) Stderr() string              { return "" }
func (s *echoStream) end()                        { s.once.Do(func() { close(s.done) }) }

func (s *echoStream) Close() error {
	_ = s.w.Close()
	_ = s.r.Close()
	s.end()
	return nil
}

// WriteFile implements agentenv.Files.
func (p *Provider) WriteFile(ctx context.Context, id, file string, data []byte) error {
	p.count("write_file")
	if _, err := p.Get(ctx, id); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	store, key, ro := p.where(id, file)
	if ro {
		return fmt.Errorf("fake: write %s:%s: a read-only mount: %w", id, file, agentenv.ErrInvalid)
	}
	store[key] = slices.Clone(data)
	return nil
}

// ReadFile implements agentenv.Files.
func (p *Provider) ReadFile(ctx context.Context, id, file string) ([]byte, error) {
	p.count("read_file")
	if _, err := p.Get(ctx, id); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	store, key, _ := p.where(id, file)
	data, ok := store[key]
	if !ok {
		return nil, fmt.Errorf("fake: read %s:%s: %w", id, file, agentenv.ErrNotFound)
	}
	return slices.Clone(data), nil
}

// EnsureImage implements agentenv.ImageChecker: the image "missing" is not there, nor is an
// image of its own (CreateImage) that was terminated.
func (p *Provider) EnsureImage(ctx context.Context, image string) error {
	p.count("ensure_image")
	return p.image(image)
}

// image says whether image is there: anything but "missing" and the images of its own that
// were terminated.
func (p *Provider) image(image string) error {
	p.mu.Lock()
	_, built := p.images[image]
	p.mu.Unlock()
	if image == "missing" || strings.HasPrefix(image, imagePrefix) && !built {
		return fmt.Errorf("fake: image %q not found: %w", image, agentenv.ErrInvalid)
	}
	return nil
}

// Logs implements agentenv.LogReader: a fake sandbox prints one line.
func (p *Provider) Logs(ctx context.Context, id string, tail int) (string, error) {
	p.count("logs")
	return "fake sandbox " + id + "\n", nil
}

// Labels that tie a container of a VM's stack to its VM and name it there.
const (
	labelVM     = "fake.vm"
	labelInVMAs = "fake.name"
)

// CreateVM implements agentenv.VMHost: an empty VM is a sandbox without ports.
func (p *Provider) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	p.count("create_vm")
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create vm %s: %w", spec.Name, err)
	}
	if err := checkName(spec.Name, spec.Labels); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: create vm: %w", err)
	}
	return p.add(spec.Name, spec.Labels, nil), nil
}

// RunInVM implements agentenv.VMHost: the container is a sandbox that carries the VM's labels
// and is removed with it.
func (p *Provider) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	p.count("run_in_vm")
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("fake: run %s in %s: %w", spec.Name, vm, err)
	}
	host, err := p.Get(ctx, vm)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	if spec.Image == "missing" {
		return agentenv.Sandbox{}, fmt.Errorf("fake: run %s in %s: image %q not found: %w", spec.Name, vm, spec.Image, agentenv.ErrInvalid)
	}
	p.mu.Lock()
	if p.inVM[vm][spec.Name] {
		p.mu.Unlock()
		return agentenv.Sandbox{}, fmt.Errorf("fake: run %s in %s: the name is taken: %w", spec.Name, vm, agentenv.ErrConflict)
	}
	if p.inVM[vm] == nil {
		p.inVM[vm] = map[string]bool{}
	}
	p.inVM[vm][spec.Name] = true
	p.mu.Unlock()
	labels := maps.Clone(host.Labels)
	maps.Copy(labels, spec.Labels)
	labels[labelVM] = vm
	labels[labelInVMAs] = spec.Name
	sb := p.add(host.Name, labels, spec.Ports)
	sb.ImageNote = pinnedNote(spec)
	return sb, nil
}

// RemoveFromVM implements agentenv.VMHost.
func (p *Provider) RemoveFromVM(ctx context.Context, vm, name string) error {
	p.count("remove_from_vm")
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fake: remove %s from %s: %w", name, vm, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inVM[vm], name)
	for id, c := range p.boxes {
		if c.Labels[labelVM] == vm && c.Labels[labelInVMAs] == name {
			p.stop(id)
			delete(p.boxes, id)
		}
	}
	return nil
}

// InVM returns the names of the containers of vm's stack, sorted.
func (p *Provider) InVM(vm string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.inVM[vm]))
}

// Kill marks the sandbox id as exited with code, as if it died behind agentenv's back.
func (p *Provider) Kill(id string, code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sb, ok := p.boxes[id]; ok {
		sb.State = agentenv.SandboxExited
		sb.ExitCode = code
		p.stop(id)
	}
}

// Remove deletes the sandbox id, as if someone removed it behind agentenv's back.
func (p *Provider) Remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop(id)
}

// Live returns the ids of the sandboxes that still exist (running or exited), sorted.
func (p *Provider) Live() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.boxes))
	for id := range p.boxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Calls returns how many times op ("create", "terminate", "list", ...) was called.
func (p *Provider) Calls(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[op]
}

func (p *Provider) count(op string) {
	p.mu.Lock()
	p.calls[op]++
	p.mu.Unlock()
}

// matches is [agentenv.MatchLabels] for sandboxes the fake made: they all carry the record label.
func matches(have, want map[string]string) bool {
	if _, ok := have[agentenv.LabelRecord]; !ok {
		return false
	}
	return agentenv.MatchLabels(have, want)
}

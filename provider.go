package agentenv

import (
	"context"
	"slices"
)

// Capabilities declares the facts about a provider that no interface can say. What it can do
// beyond Provider (private networks and so container mode, VMs and so VM mode, exec, files, volumes, ...)
// is its Abilities.
type Capabilities struct {
	OnThisMachine    bool // sandboxes run on this host: local images reach them, ports are local
	ListByLabel      bool // List finds sandboxes by label even after a lost create response
	BackstopLifetime bool // the backend removes a sandbox on its own once Timeout passes
	// Egress: a private network lets its sandboxes reach only each other, DNS and its
	// NetworkSpec.Egress. Without it, sandboxes reach any address their host reaches.
	Egress bool
	// Isolate: a private network made with NetworkSpec.Isolated has no route out of it at all
	// (a provider with Egress isolates a network given no Egress).
	Isolate bool
	// Join: a sandbox may join more private networks than its Network (SandboxSpec.Join).
	Join bool
	// User: SandboxSpec.User is honoured (the main process and commands exec'd in the sandbox
	// run as that user).
	User bool
	// BuildInVM: Create of a bare sandbox with SandboxSpec.Build builds that image inside the
	// sandbox's own fresh VM, and runs it there as the VM's main container. The build's image and
	// containers live in the VM's engine and go with its teardown; nothing is cached across VMs.
	BuildInVM bool
}

// Provider creates, finds and terminates sandboxes on one backend. Implementations must be safe
// for concurrent use by several goroutines, and by several processes sharing the backend.
//
// Providers do not write the ledger; package lifecycle wraps every call with the ledger-first
// rules (intent before create, create-or-reclaim, verified teardown).
type Provider interface {
	// Name returns the provider's configured name, such as "docker" or "modal".
	Name() string

	// Capabilities reports what the provider supports. It does no I/O.
	Capabilities() Capabilities

	// Create makes a sandbox from spec and returns once it is running. Labels and spec.Name must
	// be attached atomically with the creation where the backend allows, so that List finds the
	// sandbox from the moment it exists. On error, Create removes whatever it made before
	// returning, best effort; anything it could not remove is still found by List. It returns an
	// error wrapping ErrInvalid for a spec or configuration the backend cannot run (such as a
	// missing image or credential), only when nothing was made; and ErrUnavailable when the
	// backend cannot be reached or refuses for capacity or rate.
	Create(ctx context.Context, spec SandboxSpec) (Sandbox, error)

	// Get returns a live handle to a running sandbox for reattach. It returns an error wrapping
	// ErrNotFound if the sandbox does not exist and ErrGone if it has finished.
	Get(ctx context.Context, id string) (Sandbox, error)

	// Terminate removes the sandbox with the given id, with no live handle. It is idempotent: a
	// sandbox that has finished, is being removed, or does not exist counts as terminated and
	// returns nil. Any other error means the sandbox may still exist.
	Terminate(ctx context.Context, id string) error

	// List returns the sandboxes that carry every one of labels (an empty map lists everything
	// the provider made for agentenv), in no particular order.
	List(ctx context.Context, labels map[string]string) ([]Sandbox, error)
}

// NetworkSpec says what private network to create for a deployment in container mode.
type NetworkSpec struct {
	Name   string            // record id; required
	Labels map[string]string // the agentenv.* labels
	// Egress lists the destinations outside the network its sandboxes may reach, beside each
	// other and DNS, on a provider whose Capabilities say Egress; others ignore it (and a
	// deployer says so).
	Egress []EgressRule
	// Isolated asks for a network with no route out of it: its sandboxes reach each other and
	// nothing else (no Egress), on a provider whose Capabilities say Isolate.
	Isolated bool
}

// EgressRule is one destination a deployment's sandboxes may reach: an address range, and one
// TCP port of it or (Port 0) every port.
type EgressRule struct {
	CIDR string // an IPv4 or IPv6 prefix, such as 203.0.113.0/24
	Port int    // 1-65535, or 0 for every port
}

// Networker is implemented by providers with private networks, which container mode needs.
// A network is recorded and terminated like a sandbox: Terminate(ctx, id) of the id that
// CreateNetwork returned removes it, and List finds it by label with State SandboxRunning.
type Networker interface {
	// CreateNetwork makes a private network that sandboxes join by setting SandboxSpec.Network
	// to the returned id. The same idempotence and error rules as Provider.Create apply.
	CreateNetwork(ctx context.Context, spec NetworkSpec) (Sandbox, error)
}

// ImageSpec says what image to build: Base with Files added on top, or (Build set) an image
// built from a Dockerfile, for the same provider's sandboxes to run.
type ImageSpec struct {
	Name   string            // record id; required
	Base   string            // the image it is built from, which the provider has
	Files  map[string][]byte // absolute path -> content, modes as in SandboxSpec.Files
	Labels map[string]string // the agentenv.* labels, and any others to carry
	// Build, when set, builds the image from a build context on this machine instead; Base and
	// Files are not used. A provider that cannot build Dockerfiles refuses it as ErrInvalid.
	Build *Build
}

// Build says how to build an image from a build context on this machine.
type Build struct {
	Context    string            // a local folder: the build context
	Dockerfile string            // its path relative to Context; "Dockerfile" if empty
	Args       map[string]string // build arguments (ARG)
	BaseMap    map[string]string // an image a FROM line names -> the image to use instead (registries that cannot be reached)
}

// Imager is implemented by providers that build images of their own, which their sandboxes
// then run (a snapshot of a deployment's service DB). An image is recorded and terminated like
// a network: Terminate(ctx, id) of the id that CreateImage returned removes it (one that is
// gone counts as removed), and List finds it by label with State SandboxRunning, also when
// the build's answer was lost.
type Imager interface {
	// CreateImage builds spec and returns once the image can run: the returned Sandbox's Image
	// is the reference SandboxSpec.Image takes. The same idempotence and error rules as
	// Provider.Create apply; a Base the provider does not have is ErrInvalid, and a name in use
	// is ErrConflict.
	CreateImage(ctx context.Context, spec ImageSpec) (Sandbox, error)
}

// VolumeSpec says what volume to create: storage of its own, outside any sandbox, which the
// same provider's sandboxes mount (SandboxSpec.Mounts) to share files.
type VolumeSpec struct {
	Name   string            // record id; required
	Labels map[string]string // the agentenv.* labels
}

// Volumer is implemented by providers with volumes that several sandboxes mount. A volume is
// recorded and terminated like a network: Terminate(ctx, id) of the id that CreateVolume
// returned removes it (one that is gone counts as removed; one that a sandbox being removed
// still holds is tried again until ctx ends), and List finds it by label with State
// SandboxRunning.
type Volumer interface {
	// CreateVolume makes an empty volume that sandboxes mount by naming the returned id in
	// SandboxSpec.Mounts. The same idempotence and error rules as Provider.Create apply; a name
	// in use is ErrConflict.
	CreateVolume(ctx context.Context, spec VolumeSpec) (Sandbox, error)
}

// ExecResult is the outcome of a command run inside a sandbox.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// Execer is implemented by providers that can run a command inside a sandbox.
type Execer interface {
	// Exec runs argv in the sandbox id and waits for it to exit or ctx to end. A non-zero exit is
	// reported in ExecResult, not as an error; an error means the command could not be run.
	Exec(ctx context.Context, id string, argv []string) (ExecResult, error)
}

// Stream is a process started in a sandbox by Attacher.Attach, with its standard input and
// output attached: what a stdio MCP server in a sandbox is served over. It is safe for one
// reader and one writer at a time, and Close for concurrent use with both.
type Stream interface {
	// Read reads the process's standard output; io.EOF once it closed it (or exited).
	Read(p []byte) (int, error)
	// Write writes to the process's standard input.
	Write(p []byte) (int, error)
	// CloseWrite ends the process's standard input, the stdio way to ask it to exit; reads go on.
	CloseWrite() error
	// Done is closed once the process's output has ended: it exited or the stream was closed.
	Done() <-chan struct{}
	// Stderr returns the last bytes (a bounded tail) the process wrote to its standard error.
	Stderr() string
	// Close ends the stream and the process with it, as far as the backend allows (a process
	// that ignores the end of its input is left to the sandbox's teardown). It is idempotent.
	Close() error
}

// Attacher is implemented by providers that can start a process in a sandbox with its
// standard input and output attached as a stream, for as long as the caller holds it.
type Attacher interface {
	// Attach starts argv in the sandbox id and returns once it runs, its standard input and
	// output attached. ctx bounds only the start; the stream lasts until Close or the
	// process's end. An error means nothing was started.
	Attach(ctx context.Context, id string, argv []string) (Stream, error)
}

// VMExecer is implemented by VM hosts that can run a command in a container of a VM's stack.
// A deploy uses it for what must be done from inside the stack when the stack's ports are not
// reachable over TCP from the caller (a cloud VM whose port URLs carry only HTTP): waiting for
// the service DB and running its init SQL.
type VMExecer interface {
	// ExecInVM runs argv in the container name of vm's stack with env added to its environment
	// and stdin on its standard input, and waits for it to exit or ctx to end. A non-zero exit
	// is reported in ExecResult, not as an error; an error means the command could not be run.
	ExecInVM(ctx context.Context, vm, name string, argv []string, env map[string]string, stdin []byte) (ExecResult, error)
}

// Files is implemented by providers that can read and write files inside a sandbox.
type Files interface {
	// WriteFile writes data to path in the sandbox, creating parent directories.
	WriteFile(ctx context.Context, id, path string, data []byte) error
	// ReadFile returns the contents of path in the sandbox; ErrNotFound if there is no such file.
	ReadFile(ctx context.Context, id, path string) ([]byte, error)
}

// VMHost is implemented by providers whose VM-mode sandboxes host a stack of containers (VM
// mode). The VM is one record; the containers of its stack are not records of
// their own but carry the VM's labels, so Terminate of the VM removes them with it.
type VMHost interface {
	// CreateVM makes an empty VM named spec.Name (the record id) that a stack then runs in. The
	// rules of Provider.Create apply.
	CreateVM(ctx context.Context, spec SandboxSpec) (Sandbox, error)

	// RunInVM starts spec as a container of vm's stack, reachable by the others as spec.Name
	// (spec.Aliases too) and from the caller through Endpoints. With spec.Network set, it joins
	// that network of the stack (made on first use) instead of the one the stack shares, so
	// that the components of one deployment resolve each other's aliases there and no other
	// deployment's; a host that has one network per VM says so in its doc. What it makes
	// carries vm's labels (plus spec.Labels' role); on error it removes what it made and leaves
	// the VM.
	RunInVM(ctx context.Context, vm string, spec SandboxSpec) (Sandbox, error)

	// RemoveFromVM removes the container name of vm's stack and nothing else; one that is gone
	// counts as removed. It is how a deploy into a caller's VM undoes only its own part.
	RemoveFromVM(ctx context.Context, vm, name string) error
}

// ImageChecker is implemented by providers that run images from a store they can check, so that
// a deploy refuses an image it cannot run before it creates anything.
type ImageChecker interface {
	// EnsureImage makes image available (present, or fetched once) or returns an error wrapping
	// ErrInvalid that names it; ErrUnavailable when the backend does not answer.
	EnsureImage(ctx context.Context, image string) error
}

// LogReader is implemented by providers that keep a sandbox's output, for error messages.
type LogReader interface {
	// Logs returns the last tail lines the sandbox id printed.
	Logs(ctx context.Context, id string, tail int) (string, error)
}

// Locator is implemented by providers whose sandboxes live where a user has to be told to look
// for them by hand (a cloud account's app and region), for the warnings about sandboxes
// agentenv could not follow to the end.
type Locator interface {
	// Location describes where this provider creates sandboxes, such as "app agentenv,
	// region us-east". It does no I/O and is safe for concurrent use.
	Location() string
}

// Ability names one optional ability of a provider, beyond the Provider interface.
type Ability string

// Abilities are a provider's optional abilities, each nil where the provider lacks it. They are
// read once with AbilitiesOf and never by asserting a provider's type elsewhere, so that a
// decorator (see Intercept) keeps exactly the abilities of the provider it wraps.
type Abilities struct {
	Networker    Networker
	VMHost       VMHost
	VMExecer     VMExecer
	Execer       Execer
	Attacher     Attacher
	Files        Files
	ImageChecker ImageChecker
	LogReader    LogReader
	Locator      Locator
	Imager       Imager
	Volumer      Volumer
}

// Abler is implemented by providers that declare their abilities themselves: decorators, which
// pass on those of what they wrap, and providers whose abilities depend on their configuration
// (one type that serves a container mode and a VM mode).
type Abler interface {
	// Abilities returns the provider's optional abilities. It does no I/O.
	Abilities() Abilities
}

// AbilitiesOf returns p's optional abilities: what p declares if it is an Abler, else the
// interfaces its type implements.
func AbilitiesOf(p Provider) Abilities {
	if a, ok := p.(Abler); ok {
		return a.Abilities()
	}
	var a Abilities
	a.Networker, _ = p.(Networker)
	a.VMHost, _ = p.(VMHost)
	a.VMExecer, _ = p.(VMExecer)
	a.Execer, _ = p.(Execer)
	a.Attacher, _ = p.(Attacher)
	a.Files, _ = p.(Files)
	a.ImageChecker, _ = p.(ImageChecker)
	a.LogReader, _ = p.(LogReader)
	a.Locator, _ = p.(Locator)
	a.Imager, _ = p.(Imager)
	a.Volumer, _ = p.(Volumer)
	return a
}

// Has reports whether ability x is present.
func (a Abilities) Has(x Ability) bool { return slices.Contains(a.List(), x) }

// List returns the abilities present, in the order of the constants above.
func (a Abilities) List() []Ability {
	var out []Ability
	add := func(present bool, x Ability) {
		if present {
			out = append(out, x)
		}
	}
	add(a.Networker != nil, AbilityNetworks)
	add(a.VMHost != nil, AbilityVMs)
	add(a.VMExecer != nil, AbilityVMExec)
	add(a.Execer != nil, AbilityExec)
	add(a.Attacher != nil, AbilityAttach)
	add(a.Files != nil, AbilityFiles)
	add(a.ImageChecker != nil, AbilityImages)
	add(a.LogReader != nil, AbilityLogs)
	add(a.Locator != nil, AbilityLocation)
	add(a.Imager != nil, AbilityImageBuild)
	add(a.Volumer != nil, AbilityVolumes)
	return out
}

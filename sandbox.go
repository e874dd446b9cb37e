package agentenv

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Label keys every sandbox, network and volume carries, whatever the backend calls them (Docker
// and Kubernetes labels, Modal tags, E2B metadata).
const (
	// LabelRecord holds the ledger record id, which is also the sandbox's name.
	LabelRecord = "agentenv.record"
	// LabelRun holds the run id, or is empty outside a run.
	LabelRun = "agentenv.run"
	// LabelDeployment holds the deployment id, or is empty for a bare sandbox.
	LabelDeployment = "agentenv.deployment"
	// LabelOwner names the creating process as host/pid/start (see [Owner.String]).
	LabelOwner = "agentenv.owner"
	// LabelExpires holds the expiry as RFC 3339 in UTC; gc removes the sandbox after it.
	LabelExpires = "agentenv.expires"
	// LabelRole holds the Role a sandbox plays in a deployment.
	LabelRole = "agentenv.role"
)

// Role is the part a sandbox or component plays in a deployment: the value of LabelRole and of
// Record.Role.
type Role string

// Roles. The components' are in start order.
const (
	RoleNetwork   Role = "network" // container mode: the deployment's private network
	RoleVM        Role = "vm"      // VM mode: the VM that hosts the stack
	RoleServiceDB Role = "service_db"
	RoleMCPServer Role = "mcp_server"
	RoleDBWeb     Role = "db_web"
	RoleDBMCP     Role = "db_mcp"
	RoleGateway   Role = "gateway"
)

// TaskRole is the role of a sandbox that the step of a task run made: "task:STEP".
func TaskRole(step string) Role { return Role("task:" + step) }

// labelKey is what a user label key may look like: a DNS-ish dotted name, as Docker and
// Kubernetes accept.
var labelKey = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,126}[A-Za-z0-9])?$`)

// ParseLabel parses "key=value" as given on a command line. The key must be 1-128 characters of
// letters, digits, '.', '_', '/' or '-', starting and ending with a letter or digit, and must not
// use the reserved "agentenv." prefix.
func ParseLabel(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("label %q: want key=value: %w", s, ErrInvalid)
	}
	if err := ValidateLabel(key, value); err != nil {
		return "", "", err
	}
	return key, value, nil
}

// ValidateLabel reports whether key=value may be set on a sandbox by a user.
func ValidateLabel(key, value string) error {
	if !labelKey.MatchString(key) {
		return fmt.Errorf("label key %q: want 1-128 of [A-Za-z0-9._/-], starting and ending alphanumeric: %w", key, ErrInvalid)
	}
	if strings.HasPrefix(key, "agentenv.") {
		return fmt.Errorf("label key %q: the agentenv. prefix is reserved: %w", key, ErrInvalid)
	}
	if len(value) > 256 || strings.ContainsAny(value, "\x00\n") {
		return fmt.Errorf("label %q: value must be at most 256 characters on one line: %w", key, ErrInvalid)
	}
	return nil
}

// MatchLabels reports whether have carries every key of want with the same value: the filter of
// [Provider.List] for backends that cannot filter by label themselves. A key missing from have
// never matches, even when want's value is empty; an empty want matches everything.
func MatchLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// SandboxSpec says what to create. Name is the ledger record id; a provider uses it as the
// sandbox's name (or tag, or metadata) so that List by [LabelRecord] finds it even when the create
// response was lost.
type SandboxSpec struct {
	Name    string            // record id; required
	Image   string            // image reference; empty for a VM or a network
	Command []string          // overrides the image's command when set
	Env     map[string]string // environment of the main process
	Labels  map[string]string // must include the agentenv.* labels; set by package lifecycle
	Ports   []int             // container ports to reach from the host, published on 127.0.0.1
	WorkDir string            // working directory of the main process
	// Files are written into the sandbox before its main process starts, path -> content
	// (mode 0755 for content starting with an ELF or #! header, else 0644).
	Files map[string][]byte

	Network string       // private network to join: a record id in container mode; in VMHost.RunInVM, a network of the VM's stack
	Aliases []string     // names under which other members of Network reach this sandbox
	Egress  []EgressRule // a network's create only: its NetworkSpec.Egress

	Memory int64    // bytes; 0 means the provider's default
	CPUs   float64  // 0 means the provider's default
	Pids   int64    // most processes at once (a fork bomb stops there); 0 means the provider's default
	CapAdd []string // capabilities to keep; all others are dropped where the backend allows
	// NonRoot says the image runs as a non-root numeric user, so a backend that can check it
	// (Kubernetes runAsNonRoot) refuses to start the sandbox as root.
	NonRoot bool
	// Timeout is the backstop lifetime the backend enforces on its own (Modal timeout, E2B
	// timeout, Kubernetes activeDeadlineSeconds); 0 means until Expires.
	Timeout time.Duration
	Expires time.Time // when gc may remove the sandbox; also written as LabelExpires
}

// Check reports what no backend could make of s, before anything is recorded or created: a
// port outside 1-65535, a negative memory, CPU, process or timeout bound. Each error wraps
// ErrInvalid and names the field.
func (s SandboxSpec) Check() error {
	var errs []error
	for _, p := range s.Ports {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("port %d: want 1-65535: %w", p, ErrInvalid))
		}
	}
	if s.Memory < 0 || s.CPUs < 0 || s.Pids < 0 {
		errs = append(errs, fmt.Errorf("memory %d, cpus %g, pids %d: want 0 (the default) or more: %w", s.Memory, s.CPUs, s.Pids, ErrInvalid))
	}
	if s.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %s: want 0 (until expiry) or more: %w", s.Timeout, ErrInvalid))
	}
	return errors.Join(errs...)
}

// LabelsWithExpiry returns a fresh copy of s.Labels with LabelExpires set from s.Expires (RFC
// 3339, UTC) when Labels has none and Expires is set: the labels a provider stores on a sandbox.
func (s SandboxSpec) LabelsWithExpiry() map[string]string {
	labels := make(map[string]string, len(s.Labels)+1)
	for k, v := range s.Labels {
		labels[k] = v
	}
	if _, ok := labels[LabelExpires]; !ok && !s.Expires.IsZero() {
		labels[LabelExpires] = s.Expires.UTC().Format(time.RFC3339)
	}
	return labels
}

// DefaultPidsLimit is the process limit of a container whose spec sets none, where the backend
// can limit processes: enough for any env server, and a fork bomb in a sandbox stops there
// instead of taking the host.
const DefaultPidsLimit = 1024

// SandboxState is what a provider says of a sandbox it lists or gets.
type SandboxState string

// Sandbox states as seen by a provider.
const (
	SandboxCreating SandboxState = "creating" // made but not yet running
	SandboxRunning  SandboxState = "running"
	SandboxExited   SandboxState = "exited" // finished; Terminate counts it as terminated
)

// Sandbox is a provider's view of one sandbox.
type Sandbox struct {
	ID       string            // the provider's id; what Terminate and Get take
	Name     string            // the record id it was created under
	Provider string            // the provider (chain member) that made it
	State    SandboxState      // as listed
	Labels   map[string]string // as stored on the backend
	// Endpoints maps a container port (as a decimal string) to the address it is reached at from
	// the caller, such as "127.0.0.1:49153" or an https tunnel URL.
	Endpoints map[string]string
	// PrivateHost is the address the other sandboxes of its private network reach it at, on
	// networks that do not resolve SandboxSpec.Aliases (Modal's i6pn); "" where aliases resolve.
	PrivateHost string
	Created     time.Time
	ExitCode    int // meaningful when State is SandboxExited
	// Image is, for an image an Imager built, the reference that SandboxSpec.Image takes to run
	// it on the same provider; empty for everything else.
	Image string
}

// Capabilities declares the facts about a provider that no interface can say. What it can do
// beyond Provider (private networks and so container mode, VMs and so VM mode, exec, files, ...)
// is its Abilities.
type Capabilities struct {
	OnThisMachine    bool // sandboxes run on this host: local images reach them, ports are local
	ListByLabel      bool // List finds sandboxes by label even after a lost create response
	BackstopLifetime bool // the backend removes a sandbox on its own once Timeout passes
	// Egress: a private network lets its sandboxes reach only each other, DNS and its
	// NetworkSpec.Egress. Without it, sandboxes reach any address their host reaches.
	Egress bool
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

// ImageSpec says what image to build: Base with Files added on top, for the same provider's
// sandboxes to run.
type ImageSpec struct {
	Name   string            // record id; required
	Base   string            // the image it is built from, which the provider has
	Files  map[string][]byte // absolute path -> content, modes as in SandboxSpec.Files
	Labels map[string]string // the agentenv.* labels, and any others to carry
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

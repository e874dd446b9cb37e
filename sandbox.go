package agentenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
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
	// LabelBuildDigest holds the digest of the build context (and Dockerfile, arguments and
	// base map) an image record was built from, by which a later build of the same finds it.
	LabelBuildDigest = "agentenv.build.digest"
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
	RoleWebsite   Role = "website" // a website's backend or frontend
	RoleGateway   Role = "gateway"

	// RoleBrowserNetwork is, in container mode, the network with no route out on which a
	// deployment's browser reaches its gateway and websites, and nothing else.
	RoleBrowserNetwork Role = "browser_network"

	// RoleStateStore is a state store's own container on a Docker engine (`agentenv state up`).
	RoleStateStore Role = "state_store"

	// RoleBuild is an image built from a Dockerfile (lifecycle.Manager.BuildImage), kept to its
	// TTL for the builds of the same context that follow.
	RoleBuild Role = "build"
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
	Image   string            // image reference; empty for a VM or a network, and with Build
	Command []string          // overrides the image's command when set
	Env     map[string]string // environment of the main process
	Labels  map[string]string // must include the agentenv.* labels; set by package lifecycle
	Ports   []int             // container ports to reach from the host, published on 127.0.0.1
	WorkDir string            // working directory of the main process
	// User is who the main process (and what is exec'd in the sandbox) runs as: a name, uid or
	// uid:gid known to the image; the image's own if empty. Only a provider whose
	// Capabilities.User is true takes one: lifecycle refuses it for the others.
	User string
	// Files are written into the sandbox before its main process starts, path -> content
	// (mode 0755 for content starting with an ELF or #! header, else 0644).
	Files map[string][]byte
	// Build, for a bare sandbox on a provider whose Capabilities say BuildInVM, is the image to
	// build inside the sandbox's VM from a build context on this machine and run there, instead
	// of Image; the provider returns the built image's reference as Sandbox.Image.
	Build *Build
	// Pinned, when set, is the same image as Image pinned by digest in a registry
	// (host/repo@sha256:HEX, as a bundle pushed with its images records it). A provider that
	// can pull runs it from there, pulling it where it is absent, and falls back to Image from
	// this host when the pull fails, saying so in Sandbox.ImageNote; the others run Image.
	Pinned string
	// PullAuth, when set, is the login to Pinned's registry that pulls it (a private
	// registry); nil pulls anonymously.
	PullAuth *RegistryAuth

	Network  string       // private network to join: a record id in container mode; in VMHost.RunInVM, a network of the VM's stack
	Aliases  []string     // names under which other members of Network reach this sandbox
	Egress   []EgressRule // a network's create only: its NetworkSpec.Egress
	Isolated bool         // a network's create only: NetworkSpec.Isolated
	// Join are more private networks (container mode, record ids as Network) the sandbox joins
	// beside Network, each with its aliases there: a gateway that reaches a browser on a network
	// with no route out. Only a provider whose Capabilities say Join honours it; the others
	// refuse a spec with Join (ErrInvalid) rather than start a sandbox cut off.
	Join []NetworkJoin
	// Mounts are volumes of the same provider (record ids of Volumer volumes) mounted into the
	// sandbox. Only a provider with Volumer honours them; lifecycle refuses a spec with Mounts
	// on the others (ErrInvalid) rather than start a sandbox without the files it shares.
	Mounts []Mount
	// ShmSize is the size of /dev/shm in bytes (a browser's renderers need more than Docker's
	// 64 MiB); 0 means the provider's default. A provider that cannot size it (a cloud's
	// sandbox, a VM's inner containers, a Kubernetes Pod without a memory-backed volume) ignores
	// it: it is a tuning, not a limit.
	ShmSize int64

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
// port outside 1-65535, a negative memory, CPU, process or timeout bound, a mount without a
// volume or an absolute path. Each error wraps ErrInvalid and names the field.
func (s SandboxSpec) Check() error {
	var errs []error
	if s.ShmSize < 0 {
		errs = append(errs, fmt.Errorf("shm size %d: want 0 (the default) or more: %w", s.ShmSize, ErrInvalid))
	}
	for _, j := range s.Join {
		if j.Network == "" || j.Network == s.Network {
			errs = append(errs, fmt.Errorf("join network %q: want another network than %q: %w", j.Network, s.Network, ErrInvalid))
		}
	}
	for i, m := range s.Mounts {
		switch {
		case m.Volume == "":
			errs = append(errs, fmt.Errorf("mounts[%d].volume: want a volume's record id: %w", i, ErrInvalid))
		case !strings.HasPrefix(m.Path, "/") || path.Clean(m.Path) == "/":
			errs = append(errs, fmt.Errorf("mounts[%d].path %q: want an absolute path other than /: %w", i, m.Path, ErrInvalid))
		}
		for _, o := range s.Mounts[:i] {
			if path.Clean(o.Path) == path.Clean(m.Path) {
				errs = append(errs, fmt.Errorf("mounts[%d].path %q: mounted twice: %w", i, m.Path, ErrInvalid))
			}
		}
	}
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
	if s.Build != nil && s.Image != "" {
		errs = append(errs, fmt.Errorf("image %s and a build: want one of them: %w", s.Image, ErrInvalid))
	}
	return errors.Join(errs...)
}

// Mount is a volume mounted into a sandbox (SandboxSpec.Mounts).
type Mount struct {
	Volume   string // the volume's id: the record id its Volumer made it under
	Path     string // where it appears in the sandbox: an absolute path
	ReadOnly bool   // the sandbox reads it and cannot write it
}

// NetworkJoin is one more private network a sandbox joins (SandboxSpec.Join), with the names
// the network's other members reach it by.
type NetworkJoin struct {
	Network string
	Aliases []string
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
	// it on the same provider; for a sandbox created with SandboxSpec.Build, the reference of
	// the image built in its VM (which only that VM has); empty for everything else.
	Image string
	// ImageNote says, for a sandbox created with SandboxSpec.Pinned, how its image came to
	// run: pulled by digest, or why the pull failed and what ran instead. Empty otherwise.
	ImageNote string
}

// RegistryAuth is a login to an image registry as `docker login` leaves it in the Docker config
// file: a user name and password, or an identity token. It is a secret, passed to a provider
// for one pull and never written to the ledger: it prints and logs as "[redacted]".
type RegistryAuth struct {
	Username, Password string
	IdentityToken      string // a refresh token some registries give instead of a password
}

// Logins finds the login that pulls an image reference from its registry, nil for an anonymous
// pull: where `docker login` left one. It is how a deployment fills SandboxSpec.PullAuth.
type Logins func(ctx context.Context, ref string) *RegistryAuth

// For is l's login for ref; nil for a nil l or an empty ref.
func (l Logins) For(ctx context.Context, ref string) *RegistryAuth {
	if l == nil || ref == "" {
		return nil
	}
	return l(ctx, ref)
}

// String hides a's secrets from every %v and %s.
func (a RegistryAuth) String() string { return "[redacted]" }

// LogValue hides a's secrets from log/slog.
func (a RegistryAuth) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// GoString hides a's secrets from %#v.
func (a RegistryAuth) GoString() string { return "agentenv.RegistryAuth{[redacted]}" }

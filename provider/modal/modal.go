// Package modal is the agentenv provider for Modal sandboxes, written against Modal's official
// Go SDK, github.com/modal-labs/modal-client/go v0.11.1: container mode (provider "modal", New)
// and VM mode (provider "modal_vm", NewVM or Config.VM: one sandbox on Modal's VM runtime hosts
// a whole stack with its own Docker engine; see vm.go and the README).
//
// The record id is the sandbox's Name (unique among an app's running sandboxes) and the
// record's labels are its Tags, both set in the create request itself, so a create whose
// response was lost, or whose process was killed, is found by List. Terminate goes by id with
// no live handle (FromID, then Terminate: no tunnels, no exec); a sandbox that has finished or
// does not exist counts as terminated. Get reads the tunnels and so fails for a finished
// sandbox. A lifetime backstop (Modal's sandbox timeout) is always set: the spec's Timeout, else
// the time to its expiry plus Margin, else DefaultTimeout; never "none", at most 24 h.
//
// Ports are reached through Modal's tunnels (https://modal.com/docs/guide/tunnels). The port
// of a sandbox whose agentenv.role label is "service_db" (the PostgreSQL service DB, which its
// callers reach with the Postgres protocol, not HTTP) gets an unencrypted (raw TCP) tunnel and
// the endpoint host:port; every other port gets an encrypted (TLS) tunnel and the endpoint is
// its https URL, so that a gateway's bearer token never crosses the internet in clear. A tunnel
// that carries an unencrypted host and port is always given as host:port (the emulator, which
// cannot terminate TLS, answers every tunnel so). Env vars are sent as the SDK sends them,
// folded into an ephemeral Modal secret.
//
// Container mode (agentenv.Networker) uses Modal's private networking, i6pn
// (https://modal.com/docs/guide/private-networking): there is no network object at Modal, so
// CreateNetwork makes a logical one, whose id is its record id, and nothing at Modal (an id not
// shaped like Modal's sandbox ids, "sb-...", is taken for such a network); Terminate of
// it is a no-op, Get reports it running (in the process that made it), and List returns it (by its labels, until it is
// terminated) only in the process that made it. Sandboxes created with
// SandboxSpec.Network set have i6pn enabled and are pinned to Config.Region, which container
// mode requires (i6pn reaches only sandboxes of the same region). Modal resolves no names of
// other sandboxes on i6pn (SandboxSpec.Aliases are ignored), so Create reports each sandbox's
// PrivateHost: its own i6pn address, which it learns as Modal's guide says a container does,
// by resolving i6pn.modal.local inside it, through the SDK's Sandbox.Exec of
// "getent ahosts i6pn.modal.local". That needs getent in the image (Debian-based images have
// it; FROM scratch images do not, and their Create fails with a message saying so): verified
// only against the emulator, which answers that lookup itself.
//
// List by tags needs Modal's V1 sandboxes (the SDK's V2 sandboxes are not listed): set
// MODAL_SANDBOX_V2=0, as the agentenv command does when it is unset.
//
// Verified only against the in-repo emulator (package modalemu), which the SDK reaches when
// MODAL_SERVER_URL points at it; no Modal account was reachable from where this was written.
package modal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	dockerclient "github.com/moby/moby/client"
	modal "github.com/modal-labs/modal-client/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/keylock"
)

// Defaults for the zero values of Config. The rate and concurrency defaults stay well inside
// Modal's published sandbox limits.
const (
	DefaultName          = "modal"
	DefaultApp           = "agentenv"
	DefaultTimeout       = 3*time.Hour + 10*time.Minute
	DefaultMargin        = 10 * time.Minute
	MaxTimeout           = 24 * time.Hour
	DefaultRate          = 5.0 // creates per second
	DefaultConcurrency   = 50  // creates in flight
	DefaultCreateTimeout = 3 * time.Minute
	DefaultTunnelWait    = 60 * time.Second

	DefaultVMName      = "modal_vm"
	DefaultVMImage     = "docker:dind" // Docker's official image with dockerd and the CLI
	DefaultSlots       = 10
	DefaultTCPSlots    = 2
	DefaultSlotBase    = 20000
	DefaultDockerWait  = 2 * time.Minute
	DefaultLoadTimeout = 10 * time.Minute
)

// Regions are the region names accepted in Config.Regions (Modal's region selection guide,
// https://modal.com/docs/guide/region-selection: broad groups and cloud regions).
var Regions = []string{
	"us", "eu", "ap", "uk", "jp", "au", "ca", "me", "sa",
	"us-east", "us-west", "us-central", "eu-west", "eu-north", "eu-central", "ap-northeast", "ap-southeast", "ap-south",
	"us-east-1", "us-east-2", "us-west-1", "us-west-2", "eu-west-1", "eu-west-2", "eu-central-1", "ap-northeast-1", "ap-southeast-1",
}

// Config configures a Provider. Zero values mean the documented defaults; a negative number is
// ErrInvalid (the rule of cloudapi.Default, which every cloud provider's Config follows). Modal
// is reached through its SDK, not a cloudapi.Client, so no cloudapi.Config is embedded: its
// credential hint, backstop, rate and create bound are fields of its own.
type Config struct {
	Name        string // provider name as configured; default "modal"
	TokenID     string // Modal token id, resolved from a config reference; required
	TokenSecret string // Modal token secret, resolved from a config reference; required
	// CredentialHint says what to set when a token is missing, for the error; default names
	// provider.modal.token_id and provider.modal.token_secret.
	CredentialHint string
	App            string   // Modal app the sandboxes belong to; default "agentenv"
	Environment    string   // Modal environment; default the profile's
	Regions        []string // where sandboxes may run; empty lets Modal choose
	// Region is the one region container-mode sandboxes are pinned to (i6pn reaches only
	// sandboxes of one region); required for container mode, one of Regions' names. Empty with
	// exactly one entry in Regions means that entry. In VM mode it is optional and, when set,
	// pins the VMs to it.
	Region string
	// RegionHint names the setting of Region, for errors; default provider.modal.region.
	RegionHint    string
	Timeout       time.Duration // backstop when a spec has neither Timeout nor Expires; default 3h10m
	Margin        time.Duration // added to a spec's time to expiry; default 10m
	Rate          float64       // creates per second; default 5
	Concurrency   int           // creates in flight; default 50
	CreateTimeout time.Duration // bound on one create request; default 3m
	TunnelWait    time.Duration // bound on reading a new sandbox's tunnels; default 60s

	// VM selects VM mode (the modal_vm provider; see NewVM and vm.go): sandboxes on Modal's VM
	// runtime, each hosting a whole stack with its own Docker engine. A VM-mode Provider does
	// not do container mode, and the reverse.
	VM bool
	// VMImage is the VM's image in VM mode: a registry image with dockerd and the docker CLI
	// (started by CreateVM unless the image starts it); default DefaultVMImage. A VM image with
	// an env's images already in its Docker data spares their upload.
	VMImage string
	// Slots is how many encrypted (TLS) tunnels a VM declares at create, on VM ports SlotBase,
	// SlotBase+1, ...; the stack's HTTP ports are published on them; default 10.
	Slots int
	// TCPSlots is how many unencrypted (raw TCP) tunnels a VM declares at create, on the VM
	// ports right after the encrypted ones; ports of the service DB role go there; default 2.
	TCPSlots    int
	SlotBase    int           // first slot port of a VM; default 20000
	DockerWait  time.Duration // bound on a VM's Docker engine start; default 2m
	LoadTimeout time.Duration // bound on one image upload into a VM; default 10m
	// DockerHost is the local Docker engine VM mode saves images from; default $DOCKER_HOST,
	// else the local socket. It is used only when an image is missing from a VM.
	DockerHost string
}

// Provider creates, finds and terminates Modal sandboxes. It is safe for concurrent use.
type Provider struct {
	cfg   Config
	log   *slog.Logger
	gate  *cloudapi.Gate // creates per second and in flight
	rel   cloudapi.Releaser
	locks keylock.Set // VM mode: per-VM and per-image locks, by key

	mu     sync.Mutex
	client *modal.Client
	app    *modal.App
	nets   map[string]agentenv.Sandbox // live logical i6pn networks made here, by id
	vms    map[string]vmInfo           // VM mode: the VMs made or seen here, by sandbox id
	docker *dockerclient.Client        // VM mode: the local engine, made on first use
}

var (
	_ agentenv.Provider  = (*Provider)(nil)
	_ agentenv.Networker = (*Provider)(nil)
	_ agentenv.Locator   = (*Provider)(nil)
	_ agentenv.VMHost    = (*Provider)(nil)
)

// New returns a Provider for cfg. It does no I/O and never fails for missing credentials: every
// call then fails, before anything is created, with ErrUnavailable and a message naming what
// to set (so a chain moves on). A nil logger discards; secrets are never logged.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
		if cfg.VM {
			cfg.Name = DefaultVMName
		}
	}
	if cfg.App == "" {
		cfg.App = DefaultApp
	}
	if cfg.CredentialHint == "" {
		key := "provider." + cfg.Name
		cfg.CredentialHint = "set " + key + ".token_id and " + key + ".token_secret (for example env:MODAL_TOKEN_ID and env:MODAL_TOKEN_SECRET)"
	}
	if err := errors.Join(
		cloudapi.Default("Timeout", &cfg.Timeout, DefaultTimeout),
		cloudapi.Default("Margin", &cfg.Margin, DefaultMargin),
		cloudapi.Default("Rate", &cfg.Rate, DefaultRate),
		cloudapi.Default("Concurrency", &cfg.Concurrency, DefaultConcurrency),
		cloudapi.Default("CreateTimeout", &cfg.CreateTimeout, DefaultCreateTimeout),
		cloudapi.Default("TunnelWait", &cfg.TunnelWait, DefaultTunnelWait),
		cloudapi.Default("DockerWait", &cfg.DockerWait, DefaultDockerWait),
		cloudapi.Default("LoadTimeout", &cfg.LoadTimeout, DefaultLoadTimeout),
		cloudapi.Default("Slots", &cfg.Slots, DefaultSlots),
		cloudapi.Default("TCPSlots", &cfg.TCPSlots, DefaultTCPSlots),
		cloudapi.Default("SlotBase", &cfg.SlotBase, DefaultSlotBase),
	); err != nil {
		return nil, fmt.Errorf("modal: %w", err)
	}
	if cfg.VMImage == "" {
		cfg.VMImage = DefaultVMImage
	}
	if cfg.SlotBase+cfg.Slots+cfg.TCPSlots > 65536 {
		return nil, fmt.Errorf("modal: %d slots and %d tcp slots from %d: %w", cfg.Slots, cfg.TCPSlots, cfg.SlotBase, agentenv.ErrInvalid)
	}
	if cfg.Timeout > MaxTimeout {
		return nil, fmt.Errorf("modal: timeout %s: want at most %s: %w", cfg.Timeout, MaxTimeout, agentenv.ErrInvalid)
	}
	for _, r := range cfg.Regions {
		if !slices.Contains(Regions, r) {
			return nil, fmt.Errorf("modal: unknown region %q (known: %v): %w", r, Regions, agentenv.ErrInvalid)
		}
	}
	if cfg.RegionHint == "" {
		cfg.RegionHint = "provider.modal.region"
	}
	if cfg.Region == "" && len(cfg.Regions) == 1 {
		cfg.Region = cfg.Regions[0]
	}
	if cfg.Region != "" && !slices.Contains(Regions, cfg.Region) {
		return nil, fmt.Errorf("modal: %s: unknown region %q (known: %v): %w", cfg.RegionHint, cfg.Region, Regions, agentenv.ErrInvalid)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Provider{
		cfg: cfg, log: logger.With("provider", cfg.Name),
		gate: cloudapi.NewGate(cfg.Rate, cfg.Concurrency),
		nets: map[string]agentenv.Sandbox{},
		vms:  map[string]vmInfo{},
	}
	p.rel = cloudapi.Releaser{Provider: p, Log: p.log, Timeout: releaseTimeout}
	return p, nil
}

// NewVM returns a VM-mode Provider (New with Config.VM set), named "modal_vm" by default.
func NewVM(cfg Config, logger *slog.Logger) (*Provider, error) {
	cfg.VM = true
	return New(cfg, logger)
}

// Name returns the configured name, "modal" by default.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities reports sandboxes listed by tag, with a backstop lifetime.
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{ListByLabel: true, BackstopLifetime: true}
}

// Abilities reports container mode on i6pn (private networks, which need Config.Region at
// create), or with Config.VM VM mode only (no private networks); both say where they are.
func (p *Provider) Abilities() agentenv.Abilities {
	if p.cfg.VM {
		return agentenv.Abilities{VMHost: p, Locator: p}
	}
	return agentenv.Abilities{Networker: p, Locator: p}
}

// Close releases the SDK's connections and the local engine's client.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		p.client.Close()
		p.client, p.app = nil, nil
	}
	if p.docker != nil {
		p.docker.Close()
		p.docker = nil
	}
	return nil
}

// connect returns the SDK client and the app, made on first use.
func (p *Provider) connect(ctx context.Context) (*modal.Client, *modal.App, error) {
	if p.cfg.TokenID == "" || p.cfg.TokenSecret == "" {
		return nil, nil, fmt.Errorf("modal: no credentials: %s: %w: %w", p.cfg.CredentialHint, agentenv.ErrInvalid, agentenv.ErrUnavailable)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.app != nil {
		return p.client, p.app, nil
	}
	if p.client == nil {
		c, err := modal.NewClientWithOptions(&modal.ClientParams{
			TokenID: p.cfg.TokenID, TokenSecret: p.cfg.TokenSecret, Environment: p.cfg.Environment, Logger: p.log,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("modal: client: %w", kind(err))
		}
		p.client = c
	}
	app, err := p.client.Apps.FromName(ctx, p.cfg.App, &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		return nil, nil, fmt.Errorf("modal: app %s: %w", p.cfg.App, kind(err))
	}
	p.app = app
	return p.client, p.app, nil
}

// kind maps an SDK or gRPC error to an agentenv error kind, keeping the original.
func kind(err error) error {
	var nf modal.NotFoundError
	var ae modal.AlreadyExistsError
	var re modal.ResourceExhaustedError
	var inv modal.InvalidError
	var remote modal.RemoteError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &nf):
		return fmt.Errorf("%w: %w", agentenv.ErrNotFound, err)
	case errors.As(err, &ae):
		return fmt.Errorf("%w: %w", agentenv.ErrConflict, err)
	case errors.As(err, &re):
		return fmt.Errorf("%w: %w", agentenv.ErrUnavailable, err)
	case errors.As(err, &inv), errors.As(err, &remote):
		return fmt.Errorf("%w: %w", agentenv.ErrInvalid, err)
	}
	switch status.Code(err) {
	case codes.Canceled:
		return fmt.Errorf("%w: %w", context.Canceled, err)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	case codes.NotFound:
		return fmt.Errorf("%w: %w", agentenv.ErrNotFound, err)
	case codes.AlreadyExists:
		return fmt.Errorf("%w: %w", agentenv.ErrConflict, err)
	case codes.FailedPrecondition:
		return fmt.Errorf("%w: %w", agentenv.ErrGone, err)
	case codes.ResourceExhausted, codes.Unavailable, codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("%w: %w", agentenv.ErrUnavailable, err)
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %w", agentenv.ErrInvalid, err)
	}
	return err
}

// timeout is the backstop lifetime of spec.
func (p *Provider) timeout(spec agentenv.SandboxSpec) time.Duration {
	t := spec.Timeout
	if t <= 0 && !spec.Expires.IsZero() {
		t = time.Until(spec.Expires) + p.cfg.Margin
	}
	if t <= 0 {
		t = p.cfg.Timeout
	}
	return min(t.Round(time.Second)+time.Second, MaxTimeout)
}

// releaseTimeout bounds the undo of a create that will not be used (p.rel).
const releaseTimeout = time.Minute

// Location implements agentenv.Locator: the app, environment and region where this provider's
// sandboxes are, for a user who has to look for one in Modal's dashboard.
func (p *Provider) Location() string {
	s := "app " + p.cfg.App
	if p.cfg.Environment != "" {
		s += ", environment " + p.cfg.Environment
	}
	switch {
	case p.cfg.Region != "":
		s += ", region " + p.cfg.Region
	case len(p.cfg.Regions) > 0:
		s += ", regions " + strings.Join(p.cfg.Regions, ",")
	default:
		s += ", region of Modal's choosing"
	}
	return s
}

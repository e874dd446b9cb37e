// Package tensorlake is the agentenv provider for Tensorlake sandboxes (Firecracker microVMs),
// written with net/http and no SDK against Tensorlake's sandbox API as its public SDKs speak it
// (the Python SDK's models, tensorlake/sandbox/models.py; the Go SDK github.com/Sixt/tensorlake-go):
// the management API at https://api.tensorlake.ai/sandboxes (create, get, list, update, delete)
// and each sandbox's own API at https://ID.sandbox.tensorlake.ai/api/v1 (processes and files),
// both with the API key as a bearer token.
//
// The record id is the sandbox's name, sent in the create request itself, so a create whose
// answer was lost, or whose process was killed, is found by List (every page of GET
// /sandboxes, filtered here by name). Tensorlake's API has no labels, so the record's labels
// travel in the create request too, in the one field Tensorlake keeps and returns as sent: the
// sandbox's entrypoint, as the $0 of a /bin/sh -c wrapper (`/bin/sh -c 'exec "$@"'
// agentenv.labels={...} COMMAND...`), which the shell discards before it execs the command.
// Every image therefore needs /bin/sh, as every Tensorlake sandbox image has. Terminate is a
// DELETE by id with no connect; a sandbox Tensorlake does not know (404, the SDKs'
// SandboxNotFoundError) or one already terminated counts as terminated.
//
// A lifetime backstop, Tensorlake's timeout_secs, is always sent: the spec's Timeout, else the
// time to its expiry plus Margin, else Timeout; never none, at most MaxTimeout. Tensorlake
// counts it as an idle timeout (a sandbox in use lives on past it), so gc, not the backstop, is
// what bounds a sandbox that is still served.
//
// Port P of sandbox ID is https://P-ID.sandbox.tensorlake.ai (Config.PortURL overrides the
// mapping, which is how tests reach the emulator, package tensorlakeemu); Create exposes the
// spec's ports (exposed_ports) without Tensorlake authentication (allow_unauthenticated_access),
// since agentenv's gateway has its bearer token of its own. Port 9501 is the sandbox's API.
//
// Tensorlake has no private network between sandboxes, so there is no container mode of a
// whole env: an env deploys in VM mode (vm.go: one sandbox from a Docker-capable image,
// Config.VMImage, hosts the stack with its own Docker engine, through internal/vmdocker), and
// bare sandboxes (a task's deploy_sandbox) are single sandboxes with exec, files and ports.
//
// Verified only against the in-repo emulator; no Tensorlake account was reachable from where
// this was written.
package tensorlake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/keylock"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// Defaults for the zero values of Config.
const (
	DefaultName           = "tensorlake"
	DefaultAPIURL         = "https://api.tensorlake.ai"
	DefaultDomain         = "sandbox.tensorlake.ai"
	DefaultTimeout        = 3*time.Hour + 10*time.Minute
	DefaultMargin         = 10 * time.Minute
	DefaultMaxTimeout     = 24 * time.Hour
	DefaultRate           = 5.0 // creates per second
	DefaultConcurrency    = 50  // creates in flight
	DefaultCreateTimeout  = 3 * time.Minute
	DefaultRequestTimeout = 30 * time.Second
	DefaultDockerWait     = 2 * time.Minute
	DefaultCPUs           = 1.0
	DefaultMemoryMB       = 1024

	// APIPort is the sandbox's own API (processes, files); it cannot be exposed.
	APIPort = 9501
)

// Config configures a Provider. Zero values mean the defaults: those of the embedded
// cloudapi.Config are [DefaultTimeout], [DefaultMargin], [DefaultMaxTimeout] (the longest
// timeout_secs sent), [DefaultRate], [DefaultConcurrency], [DefaultCreateTimeout] (a bound on a
// create and its wait for "running") and [DefaultRequestTimeout]; CredentialHint names
// provider.tensorlake.api_key, and HTTPClient is a client with no overall timeout. A negative
// number is ErrInvalid.
type Config struct {
	cloudapi.Config

	Name   string // provider name as configured; default "tensorlake"
	APIKey string // Tensorlake API key, resolved from a config reference; required, never logged
	APIURL string // management API base; default https://api.tensorlake.ai (it serves /sandboxes)
	// ProxyURL maps sandbox ID to the base of its own API; default https://ID.sandbox.tensorlake.ai.
	ProxyURL func(id string) string
	// PortURL maps port P of sandbox ID to its base URL; default https://P-ID.sandbox.tensorlake.ai.
	PortURL func(id string, port int) string
	Image   string // image of a Create whose spec names none; default Tensorlake's default image
	// VMImage is the Docker-capable Tensorlake sandbox image of CreateVM (VM mode): an image with
	// dockerd and the docker CLI, registered in the account. Required for VM mode; no default.
	VMImage string
	// VMImageHint names the setting of VMImage, for errors; default provider.tensorlake.vm_image.
	VMImageHint string
	// DockerHost is the local Docker engine RunInVM uploads an image from when the VM lacks it;
	// default $DOCKER_HOST, else the local socket.
	DockerHost string
	DockerWait time.Duration // bound on a VM's Docker engine start; default [DefaultDockerWait]
}

// Provider creates, finds and terminates Tensorlake sandboxes. It is safe for concurrent use.
type Provider struct {
	cfg      Config
	log      *slog.Logger
	client   *cloudapi.Client
	creates  cloudapi.Creates
	backstop cloudapi.Backstop
	rel      cloudapi.Releaser

	vms keylock.Set // VM mode: one lock per VM, held while its exposed ports change

	vmdocker.VMs // RunInVM, RemoveFromVM and ExecInVM, over host
}

var (
	_ agentenv.Provider = (*Provider)(nil)
	_ agentenv.Execer   = (*Provider)(nil)
	_ agentenv.Files    = (*Provider)(nil)
	_ agentenv.VMHost   = (*Provider)(nil)
	_ agentenv.VMExecer = (*Provider)(nil)
	_ agentenv.Locator  = (*Provider)(nil)
)

// New returns a Provider for cfg. It does no I/O and never fails for a missing API key: every
// call then fails, before anything is created, with ErrInvalid and ErrUnavailable and a message
// naming what to set (so a chain moves on). A nil logger discards; the key is never logged.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	cfg.APIURL = strings.TrimRight(cfg.APIURL, "/")
	if cfg.ProxyURL == nil {
		cfg.ProxyURL = func(id string) string { return "https://" + id + "." + DefaultDomain }
	}
	if cfg.PortURL == nil {
		cfg.PortURL = func(id string, port int) string { return fmt.Sprintf("https://%d-%s.%s", port, id, DefaultDomain) }
	}
	if cfg.VMImageHint == "" {
		cfg.VMImageHint = "provider.tensorlake.vm_image"
	}
	if err := errors.Join(cfg.Defaults(cloudapi.Config{
		CredentialHint: "set provider.tensorlake.api_key (for example env:TENSORLAKE_API_KEY)",
		Timeout:        DefaultTimeout, Margin: DefaultMargin, MaxTimeout: DefaultMaxTimeout,
		Rate: DefaultRate, Concurrency: DefaultConcurrency,
		CreateTimeout: DefaultCreateTimeout, RequestTimeout: DefaultRequestTimeout,
		HTTPClient: &http.Client{},
	}), cloudapi.Default("DockerWait", &cfg.DockerWait, DefaultDockerWait)); err != nil {
		return nil, fmt.Errorf("tensorlake: %w", err)
	}
	if err := cloudapi.CheckImages(cfg.Image, cfg.VMImage); err != nil {
		return nil, fmt.Errorf("tensorlake: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hc := cfg.HTTPClient
	p := &Provider{
		cfg: cfg, log: logger.With("provider", cfg.Name),
		client: &cloudapi.Client{Name: "tensorlake", Key: cfg.APIKey, KeyHint: cfg.CredentialHint,
			Auth: cloudapi.Bearer, HTTP: hc},
		backstop: cloudapi.Backstop{Default: cfg.Timeout, Margin: cfg.Margin, Max: cfg.MaxTimeout},
	}
	p.rel = cloudapi.Releaser{Provider: p, Log: p.log, Timeout: cfg.RequestTimeout}
	p.creates = cloudapi.Creates{Prefix: "tensorlake", Gate: cloudapi.NewGate(cfg.Rate, cfg.Concurrency), Check: p.client.CheckKey, Timeout: cfg.CreateTimeout}
	p.VMs = vmdocker.VMs{Prefix: "tensorlake", Provider: cfg.Name, Valid: cloudapi.RecordName.MatchString, Find: p.host}
	return p, nil
}

// Name returns the configured name, "tensorlake" by default.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities reports sandboxes found by name after a lost answer, with a backstop lifetime
// (an idle timeout; see the package doc).
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{ListByLabel: true, BackstopLifetime: true}
}

// Location implements agentenv.Locator: the Tensorlake API (and so the account's project) the
// sandboxes were created through.
func (p *Provider) Location() string { return "Tensorlake at " + p.cfg.APIURL }

// Endpoint returns the base URL of port of sandbox id, as Tensorlake exposes it.
func (p *Provider) Endpoint(id string, port int) string { return p.cfg.PortURL(id, port) }

// kind maps an HTTP outcome to an agentenv error kind (see apierr.Kind).
func kind(err error) error { return apierr.Kind(err) }

// do sends one request with the key as a bearer token and returns the 2xx answer's body open
// (the caller closes it), as cloudapi.Client.Do: a non-2xx answer is an *apierr.Error (the
// management API answers plain text, the sandbox API {"error": "...", "code": "..."}).
func (p *Provider) do(ctx context.Context, method, url string, body io.Reader, contentType string) (*http.Response, error) {
	return p.client.Do(ctx, method, url, body, contentType)
}

// call sends a JSON request (in may be nil) and decodes a 2xx JSON answer into out (if not nil).
func (p *Provider) call(ctx context.Context, method, url string, in, out any) error {
	_, err := p.client.JSON(ctx, method, url, in, out)
	return err
}

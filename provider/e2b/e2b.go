// Package e2b is the agentenv provider for E2B sandboxes (Firecracker microVMs made from a
// template), written against E2B's documented REST API (https://e2b.dev/docs/api-reference,
// the OpenAPI spec in github.com/e2b-dev/infra spec/openapi.yml) with net/http and no SDK, and
// against the in-sandbox process API (envd's process.Process service, spoken with the Connect
// protocol in JSON, as E2B's SDKs do).
//
// The record id and every agentenv label travel as the sandbox's metadata in the create request
// itself, so a create whose response was lost, or whose process was killed, is found by List
// (GET /v2/sandboxes filtered by metadata, every page, and filtered again here). Terminate is a
// DELETE by id with no connect; 404 (already killed, timed out, or never there) counts as gone,
// as the SDKs' kill() returning false does. A lifetime backstop (E2B's sandbox timeout) is always
// sent: the spec's Timeout, else the time to its expiry plus Margin, else Timeout; never none,
// at most MaxTimeout.
//
// E2B forgets a sandbox once it has ended: a killed or timed-out sandbox answers 404 like one
// that never existed, and is not listed. Get therefore reports 404 as ErrNotFound and ErrGone
// at once (it cannot be reattached either way); a paused sandbox is ErrGone.
//
// Port P of sandbox ID is reached at https://P-ID.<domain> (Config.SandboxURL overrides the
// mapping, which is how tests reach the emulator, package e2bemu).
//
// Verified only against the in-repo emulator; no E2B account was reachable from where this was
// written.
package e2b

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// Defaults for the zero values of Config. Rate and concurrency are E2B's published Hobby-tier
// limits (https://e2b.dev/docs/sandbox/rate-limits: 1 create per second, 20 concurrent).
const (
	DefaultName           = "e2b"
	DefaultDomain         = "e2b.app"
	DefaultTemplate       = "base"
	DefaultVMTemplate     = "docker"
	DefaultTimeout        = 3*time.Hour + 10*time.Minute
	DefaultMargin         = 10 * time.Minute
	DefaultMaxTimeout     = 24 * time.Hour // Pro tier; Hobby allows 1 h
	DefaultRate           = 1.0            // creates per second
	DefaultConcurrency    = 20             // creates in flight
	DefaultCreateTimeout  = 3 * time.Minute
	DefaultRequestTimeout = 30 * time.Second

	// EnvdPort is the port of the in-sandbox daemon (envd) that serves the process API.
	EnvdPort = 49983
)

// Config configures a Provider. Zero values mean the defaults: those of the embedded
// cloudapi.Config are [DefaultTimeout], [DefaultMargin], [DefaultMaxTimeout] (E2B's maximum
// sandbox lifetime for the account), [DefaultRate], [DefaultConcurrency], [DefaultCreateTimeout]
// (a bound on one create request) and [DefaultRequestTimeout]; CredentialHint names
// provider.e2b.api_key, and HTTPClient is a client with no overall timeout. A negative number is
// ErrInvalid.
type Config struct {
	cloudapi.Config

	Name   string // provider name as configured; default "e2b"
	APIKey string // E2B API key, resolved from a config reference; required, never logged
	Domain string // default "e2b.app"; the API is https://api.<Domain>
	APIURL string // overrides https://api.<Domain> (the emulator's URL in tests)
	// SandboxURL maps port P of sandbox ID to its base URL; default https://P-ID.<Domain>.
	SandboxURL func(id string, port int) string
	Template   string // template of Create when a spec names no image; default "base"
	VMTemplate string // Docker-capable template of CreateVM; default "docker"
	// DockerHost is the local Docker engine RunInVM uploads an image from when the VM lacks it;
	// default $DOCKER_HOST, else the local socket.
	DockerHost string
}

// Provider creates, finds and terminates E2B sandboxes. It is safe for concurrent use.
type Provider struct {
	cfg      Config
	log      *slog.Logger
	http     *http.Client // envd, reached without the API key
	client   *cloudapi.Client
	creates  cloudapi.Creates
	backstop cloudapi.Backstop
	rel      cloudapi.Releaser

	vmdocker.VMs // RunInVM, RemoveFromVM and ExecInVM, over host
}

var (
	_ agentenv.Provider = (*Provider)(nil)
	_ agentenv.VMHost   = (*Provider)(nil)
	_ agentenv.VMExecer = (*Provider)(nil)
	_ agentenv.Locator  = (*Provider)(nil)
)

// New returns a Provider for cfg. It does no I/O and never fails for a missing API key: every
// call then fails, before anything is created, with ErrUnavailable and a message naming what
// to set (so a chain moves on). A nil logger discards; the key is never logged.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Domain == "" {
		cfg.Domain = DefaultDomain
	}
	if cfg.APIURL == "" {
		cfg.APIURL = "https://api." + cfg.Domain
	}
	cfg.APIURL = strings.TrimRight(cfg.APIURL, "/")
	if cfg.SandboxURL == nil {
		domain := cfg.Domain
		cfg.SandboxURL = func(id string, port int) string { return fmt.Sprintf("https://%d-%s.%s", port, id, domain) }
	}
	if cfg.Template == "" {
		cfg.Template = DefaultTemplate
	}
	if cfg.VMTemplate == "" {
		cfg.VMTemplate = DefaultVMTemplate
	}
	if err := cfg.Defaults(cloudapi.Config{
		CredentialHint: "set provider.e2b.api_key (for example env:E2B_API_KEY)",
		Timeout:        DefaultTimeout, Margin: DefaultMargin, MaxTimeout: DefaultMaxTimeout,
		Rate: DefaultRate, Concurrency: DefaultConcurrency,
		CreateTimeout: DefaultCreateTimeout, RequestTimeout: DefaultRequestTimeout,
		HTTPClient: &http.Client{},
	}); err != nil {
		return nil, fmt.Errorf("e2b: %w", err)
	}
	if !templateName.MatchString(cfg.Template) || !templateName.MatchString(cfg.VMTemplate) {
		return nil, fmt.Errorf("e2b: template %q or %q: want a template id or alias: %w", cfg.Template, cfg.VMTemplate, agentenv.ErrInvalid)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hc := cfg.HTTPClient
	p := &Provider{
		cfg: cfg, log: logger.With("provider", cfg.Name), http: hc,
		client: &cloudapi.Client{Name: "e2b", Key: cfg.APIKey, KeyHint: cfg.CredentialHint,
			Auth: cloudapi.Header("X-API-Key"), HTTP: hc},
		backstop: cloudapi.Backstop{Default: cfg.Timeout, Margin: cfg.Margin, Max: cfg.MaxTimeout},
	}
	p.rel = cloudapi.Releaser{Provider: p, Log: p.log, Timeout: cfg.RequestTimeout}
	p.creates = cloudapi.Creates{Prefix: "e2b", Gate: cloudapi.NewGate(cfg.Rate, cfg.Concurrency), Check: p.client.CheckKey, Timeout: cfg.CreateTimeout}
	p.VMs = vmdocker.VMs{Prefix: "e2b", Provider: cfg.Name, Valid: cloudapi.RecordName.MatchString, Find: p.host}
	return p, nil
}

// Name returns the configured name, "e2b" by default.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities reports VM-mode sandboxes, listed by metadata, with a backstop lifetime.
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{ListByLabel: true, BackstopLifetime: true}
}

// Endpoint returns the base URL of port of sandbox id, as E2B exposes it.
func (p *Provider) Endpoint(id string, port int) string { return p.cfg.SandboxURL(id, port) }

// templateName is what a template id or alias looks like (team/name:tag included).
var templateName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_./:-]{0,127}$`)

// kind maps an HTTP outcome to an agentenv error kind (see apierr.Kind). A 404 is ErrNotFound,
// whose meaning the caller knows.
func kind(err error) error { return apierr.Kind(err) }

// call sends one API request (path below Config.APIURL) with the key in the X-API-Key header
// and decodes a 2xx JSON answer, {"code": 404, "message": "..."} otherwise, as
// cloudapi.Client.JSON.
func (p *Provider) call(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	return p.client.JSON(ctx, method, p.cfg.APIURL+path, in, out)
}

// Location implements agentenv.Locator: the E2B API (and so the account's team) the sandboxes
// were created through.
func (p *Provider) Location() string { return "E2B at " + p.cfg.APIURL }

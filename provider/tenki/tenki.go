// Package tenki is the agentenv provider for Tenki sandboxes (microVM sessions, tenki.cloud),
// over Tenki's sandbox API as its public SDKs speak it (the Go SDK
// github.com/TenkiCloud/tenki-sdk-go, the TypeScript SDK @tenkicloud/sandbox): Connect RPC,
// spoken here with connectrpc.com/connect and a JSON codec over the structs of
// internal/wire, never Tenki's generated code.
//
//   - The control plane, tenki.sandbox.v1.SandboxService at the API endpoint
//     (https://api.tenki.cloud, TENKI_API_ENDPOINT): CreateSession, GetSession,
//     ListWorkspaceSandboxes (what both SDKs' List call), TerminateSession, ExposePort,
//     ListExposedPorts and CreateSessionCredential, with the API key as the SDKs send it
//     (a "tk_" key as a bearer token).
//   - Each session's data plane, tenki.sandbox.v1.SandboxSessionDataPlaneService at the
//     endpoint its credential names, with the credential in x-tenki-session-cert: Run (a
//     bidirectional stream: start, stdin, exit) and WriteFile/ReadFile.
//
// The record id is the session's name and its labels are the session's metadata, both sent in
// CreateSession itself, with the tag "agentenv" that List asks the service to filter by; so a
// create whose answer was lost, or whose creator was killed, is found by listing. The backstop
// lifetime is the session's max_duration, always sent: the spec's Timeout, else the time to its
// expiry plus Margin, else Timeout; at most MaxTimeout. Terminate is TerminateSession by id; a
// session Tenki does not know, or one already ended (terminating, terminated), counts as
// terminated, as seed 002 has it for Tenki.
//
// A Tenki session is a whole VM with no entrypoint. A bare sandbox (Create) is a session from
// the spec's image (a Tenki registry reference) in which the spec's files are written and its
// command is started as root through Run, detached, followed by a shutdown of the guest: the
// sandbox finishes when its command does, as a container would. Its ports are exposed as
// preview URLs (ExposePort) and are its Endpoints. Tenki has no private network between
// sessions, so there is no container mode of a whole env: an env deploys in VM mode (vm.go: one
// session hosts the stack in its own Docker engine, through internal/vmdocker).
//
// Verified only against the in-repo emulator (package tenkiemu); no Tenki account was
// reachable from where this was written.
package tenki

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/keylock"
	"github.com/agentenv/agentenv/internal/vmdocker"
	"github.com/agentenv/agentenv/provider/tenki/internal/wire"
)

// Defaults for the zero values of Config.
const (
	DefaultName           = "tenki"
	DefaultAPIURL         = "https://api.tenki.cloud"
	DefaultTimeout        = 3*time.Hour + 10*time.Minute
	DefaultMargin         = 10 * time.Minute
	DefaultMaxTimeout     = 24 * time.Hour
	DefaultRate           = 5.0 // creates per second
	DefaultConcurrency    = 50  // creates in flight
	DefaultCreateTimeout  = 3 * time.Minute
	DefaultRequestTimeout = 30 * time.Second
	DefaultDockerWait     = 2 * time.Minute

	// ClientFamily is what agentenv calls itself in X-Tenki-Client-Family.
	ClientFamily = "agentenv"
)

// Config configures a Provider. Zero values mean the defaults: those of the embedded
// cloudapi.Config are [DefaultTimeout], [DefaultMargin], [DefaultMaxTimeout] (the longest
// max_duration sent), [DefaultRate], [DefaultConcurrency], [DefaultCreateTimeout] (a bound on a
// create and its wait until the session runs) and [DefaultRequestTimeout]; CredentialHint names
// provider.tenki.token, and HTTPClient, which carries both planes, is a client speaking HTTP/2
// only (over TLS, and in cleartext to an http:// endpoint), which Connect's bidirectional Run
// needs. A negative number is ErrInvalid.
type Config struct {
	cloudapi.Config

	Name string // provider name as configured; default "tenki"
	// Token is the Tenki API key (a workspace key "tk_...", as TENKI_AUTH_TOKEN or TENKI_API_KEY
	// hold it), resolved from a config reference; required, never logged.
	Token  string
	APIURL string // control plane endpoint; default https://api.tenki.cloud (TENKI_API_ENDPOINT)
	// Image is the Tenki registry reference of a Create whose spec names none; default Tenki's
	// default image.
	Image string
	// VMImage is the registry reference of CreateVM's session (VM mode), an image with dockerd
	// and the docker CLI; default Tenki's default image, whose engine CreateVM starts if it is
	// not running.
	VMImage string
	// DockerHost is the local Docker engine RunInVM uploads an image from when the VM lacks it;
	// default $DOCKER_HOST, else the local socket.
	DockerHost string
	DockerWait time.Duration // bound on a VM's Docker engine start; default [DefaultDockerWait]
}

// Provider creates, finds and terminates Tenki sessions. It is safe for concurrent use.
type Provider struct {
	cfg      Config
	log      *slog.Logger
	http     *http.Client
	key      *cloudapi.Client // the token and what to set without one; calls go through Connect
	creates  cloudapi.Creates
	backstop cloudapi.Backstop
	rel      cloudapi.Releaser

	createSession     *connect.Client[wire.CreateSessionRequest, wire.CreateSessionResponse]
	getSession        *connect.Client[wire.SessionID, wire.SessionAnswer]
	listSessions      *connect.Client[wire.ListWorkspaceSandboxesRequest, wire.ListWorkspaceSandboxesResponse]
	terminateSession  *connect.Client[wire.SessionID, wire.SessionAnswer]
	exposePort        *connect.Client[wire.ExposePortRequest, wire.PortExposure]
	listExposedPorts  *connect.Client[wire.SessionID, wire.ListExposedPortsResponse]
	sessionCredential *connect.Client[wire.SessionID, wire.CreateSessionCredentialResponse]

	mu     sync.Mutex
	planes map[string]plane // data plane of each session seen, until its credential expires
	vms    keylock.Set      // VM mode: one lock per VM, held while its ports are exposed

	vmdocker.VMs // RunInVM and RemoveFromVM, over host
}

var (
	_ agentenv.Provider = (*Provider)(nil)
	_ agentenv.Execer   = (*Provider)(nil)
	_ agentenv.Files    = (*Provider)(nil)
	_ agentenv.VMHost   = (*Provider)(nil)
	_ agentenv.VMExecer = (*Provider)(nil)
	_ agentenv.Locator  = (*Provider)(nil)
)

// New returns a Provider for cfg. It does no I/O and never fails for a missing token: every call
// then fails, before anything is sent, with ErrInvalid and ErrUnavailable and a message naming
// what to set (so a chain moves on). A nil logger discards; the token is never logged.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	cfg.APIURL = strings.TrimRight(cfg.APIURL, "/")
	if !strings.HasPrefix(cfg.APIURL, "https://") && !strings.HasPrefix(cfg.APIURL, "http://") {
		return nil, fmt.Errorf("tenki: api url %q: want an http(s) URL: %w", cfg.APIURL, agentenv.ErrInvalid)
	}
	if err := errors.Join(cfg.Defaults(cloudapi.Config{
		CredentialHint: "set provider.tenki.token (for example env:TENKI_AUTH_TOKEN or env:TENKI_API_KEY)",
		Timeout:        DefaultTimeout, Margin: DefaultMargin, MaxTimeout: DefaultMaxTimeout,
		Rate: DefaultRate, Concurrency: DefaultConcurrency,
		CreateTimeout: DefaultCreateTimeout, RequestTimeout: DefaultRequestTimeout,
		HTTPClient: &http.Client{Transport: h2Transport()},
	}), cloudapi.Default("DockerWait", &cfg.DockerWait, DefaultDockerWait)); err != nil {
		return nil, fmt.Errorf("tenki: %w", err)
	}
	if err := cloudapi.CheckImages(cfg.Image, cfg.VMImage); err != nil {
		return nil, fmt.Errorf("tenki: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hc := cfg.HTTPClient
	p := &Provider{
		cfg: cfg, log: logger.With("provider", cfg.Name), http: hc,
		key:      &cloudapi.Client{Name: "tenki", Key: cfg.Token, KeyHint: cfg.CredentialHint, Auth: cloudapi.Bearer, HTTP: hc},
		backstop: cloudapi.Backstop{Default: cfg.Timeout, Margin: cfg.Margin, Max: cfg.MaxTimeout},
		planes:   map[string]plane{},
	}
	p.rel = cloudapi.Releaser{Provider: p, Log: p.log, Timeout: cfg.RequestTimeout}
	p.creates = cloudapi.Creates{Prefix: "tenki", Gate: cloudapi.NewGate(cfg.Rate, cfg.Concurrency), Check: p.key.CheckKey, Timeout: cfg.CreateTimeout}
	p.VMs = vmdocker.VMs{Prefix: "tenki", Provider: cfg.Name, Valid: cloudapi.RecordName.MatchString, Find: p.host}
	opts := []connect.ClientOption{connect.WithCodec(wire.Codec{}), connect.WithInterceptors(authInterceptor(cfg.Token))}
	u := cfg.APIURL
	p.createSession = connect.NewClient[wire.CreateSessionRequest, wire.CreateSessionResponse](hc, u+wire.CreateSession, opts...)
	p.getSession = connect.NewClient[wire.SessionID, wire.SessionAnswer](hc, u+wire.GetSession, opts...)
	p.listSessions = connect.NewClient[wire.ListWorkspaceSandboxesRequest, wire.ListWorkspaceSandboxesResponse](hc, u+wire.ListWorkspaceSandboxes, opts...)
	p.terminateSession = connect.NewClient[wire.SessionID, wire.SessionAnswer](hc, u+wire.TerminateSession, opts...)
	p.exposePort = connect.NewClient[wire.ExposePortRequest, wire.PortExposure](hc, u+wire.ExposePort, opts...)
	p.listExposedPorts = connect.NewClient[wire.SessionID, wire.ListExposedPortsResponse](hc, u+wire.ListExposedPorts, opts...)
	p.sessionCredential = connect.NewClient[wire.SessionID, wire.CreateSessionCredentialResponse](hc, u+wire.CreateSessionCredential, opts...)
	return p, nil
}

// h2Transport is an HTTP/2-only transport: over TLS as usual, and with prior knowledge to an
// http:// endpoint (a local emulator), since Connect's bidirectional streams need HTTP/2.
func h2Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP2(true)
	t.Protocols.SetUnencryptedHTTP2(true)
	return t
}

// authInterceptor sets the token's headers on every control-plane call, as the SDKs do.
func authInterceptor(token string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			wire.SetAuth(req.Header(), token, ClientFamily)
			return next(ctx, req)
		}
	})
}

// Name returns the configured name, "tenki" by default.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities reports sessions found by name and metadata after a lost answer, with a backstop
// lifetime (max_duration).
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{ListByLabel: true, BackstopLifetime: true}
}

// Location implements agentenv.Locator: the Tenki API (and so the workspace of its key) the
// sessions were created through.
func (p *Provider) Location() string { return "Tenki at " + p.cfg.APIURL }

// Abilities reports exec, files, VM mode (with commands in a VM's containers) and a location;
// no private networks, so no container mode of a whole env.
func (p *Provider) Abilities() agentenv.Abilities {
	return agentenv.Abilities{Execer: p, Files: p, VMHost: p, VMExecer: p, Locator: p}
}

// call makes one unary control-plane call; a failure is mapped with kind.
func call[Req, Res any](ctx context.Context, p *Provider, c *connect.Client[Req, Res], in *Req) (*Res, error) {
	if err := p.key.CheckKey(); err != nil {
		return nil, err
	}
	resp, err := c.CallUnary(ctx, connect.NewRequest(in))
	if err != nil {
		return nil, kind(ctx, err)
	}
	return resp.Msg, nil
}

// kind maps a Connect outcome to agentenv's error kinds, keeping the original: an unknown or
// missing key, rate limits, quotas and capacity (Unauthenticated, PermissionDenied,
// ResourceExhausted, Unavailable) are ErrUnavailable, so a chain moves on; NotFound is
// ErrNotFound; AlreadyExists ErrConflict; InvalidArgument and OutOfRange ErrInvalid;
// FailedPrecondition on an ended session ErrGone. A cancelled or expired ctx wins over what the
// transport made of it.
func kind(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeResourceExhausted, connect.CodeUnavailable:
		return fmt.Errorf("%w: %w", agentenv.ErrUnavailable, err)
	case connect.CodeNotFound:
		return fmt.Errorf("%w: %w", agentenv.ErrNotFound, err)
	case connect.CodeAlreadyExists:
		return fmt.Errorf("%w: %w", agentenv.ErrConflict, err)
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return fmt.Errorf("%w: %w", agentenv.ErrInvalid, err)
	case connect.CodeFailedPrecondition:
		var ce *connect.Error
		if errors.As(err, &ce) && strings.Contains(strings.ToLower(ce.Message()), "terminated") {
			return fmt.Errorf("%w: %w", agentenv.ErrGone, err)
		}
		return fmt.Errorf("%w: %w", agentenv.ErrInvalid, err)
	}
	return err
}

// refused reports whether err is the service's own answer that it made nothing: a create
// refused for its content, its credentials, a quota or a rate. Anything else (a transport
// failure, an internal error, an answer that never came) leaves the outcome unknown.
func refused(err error) bool {
	if !connect.IsWireError(err) {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists, connect.CodePermissionDenied,
		connect.CodeResourceExhausted, connect.CodeFailedPrecondition, connect.CodeOutOfRange,
		connect.CodeUnimplemented, connect.CodeUnauthenticated:
		return true
	}
	return false
}

// forget drops what this Provider keeps of session id.
func (p *Provider) forget(id string) {
	p.mu.Lock()
	delete(p.planes, id)
	p.mu.Unlock()
	p.vms.Forget(id)
}

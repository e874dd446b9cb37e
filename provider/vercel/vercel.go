// Package vercel is the agentenv provider for Vercel Sandbox (ephemeral Firecracker microVMs),
// written with net/http and no SDK against the REST API that the public TypeScript SDK
// @vercel/sandbox 3.x speaks (src/api-client/api-client.ts, validators.ts): sandboxes by name
// under /v2/sandboxes (created through /v3/sandboxes, which takes an image), each running one
// session at a time whose commands and files live under /v2/sandboxes/sessions/{id}. Every
// request carries the token as a bearer token and the team as the teamId query parameter; every
// sandbox belongs to the configured project.
//
// The record id is the sandbox's name, sent in the create request itself, so a create whose
// answer was lost, or whose process was killed, is found (GET /v2/sandboxes/{name}) and
// terminated by name. The record's labels travel in the sandbox's tags, at most five of them:
// see tags.go for the encoding. Sandboxes are created with persistent false (no snapshot when
// they stop). Terminate stops the sandbox's session and deletes the sandbox; one Vercel does not
// know (404) counts as terminated.
//
// A lifetime backstop, the sandbox's timeout (Vercel stops the session when it passes), is always
// sent: the spec's Timeout, else the time to its expiry plus Margin, else Timeout; at most
// MaxTimeout, the plan's limit (5 hours on Pro, 45 minutes on Hobby).
//
// Vercel runs no image command of its own: Create starts the spec's command, if any, as a
// detached command of the session (with the spec's environment and working directory, which so
// never travel in the create request), and keeps its id in the tags; a sandbox whose command has
// exited is reported exited with its exit code, though its VM runs on until it is terminated or
// its timeout passes. Ports are Vercel's routes (https://SUBDOMAIN.vercel.run), public.
//
// Vercel has no private network between sandboxes, so there is no container mode of a whole
// env: an env deploys in VM mode (vm.go: one sandbox from a Docker-capable image, Config.VMImage,
// hosts the stack with its own Docker engine, through internal/vmdocker), and bare sandboxes (a
// task's deploy_sandbox) are single sandboxes with exec, files and ports.
//
// Verified only against the in-repo emulator (package vercelemu); no Vercel account was
// reachable from where this was written.
package vercel

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
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
	DefaultName           = "vercel"
	DefaultAPIURL         = "https://vercel.com/api" // the SDK's base URL
	DefaultTimeout        = 3*time.Hour + 10*time.Minute
	DefaultMargin         = 10 * time.Minute
	DefaultMaxTimeout     = 5 * time.Hour // Pro and Enterprise plans; Hobby allows 45 minutes
	DefaultRate           = 5.0           // creates per second
	DefaultConcurrency    = 50            // creates in flight
	DefaultCreateTimeout  = 3 * time.Minute
	DefaultRequestTimeout = 30 * time.Second
	DefaultDockerWait     = 2 * time.Minute

	// MaxPorts is how many ports (routes) a sandbox exposes at most.
	MaxPorts = 15
	// memoryPerVCPU is the memory Vercel gives each vCPU.
	memoryPerVCPU = 2048 << 20
	// maxVCPUs is the largest sandbox this provider asks for.
	maxVCPUs = 32
)

// CredentialHint says what to set for the credentials: the CLI's keys and their environment
// variables, which the SDK and Vercel's docs name.
const CredentialHint = "set provider.vercel.token (env:VERCEL_TOKEN), provider.vercel.team_id (env:VERCEL_TEAM_ID) and provider.vercel.project_id (env:VERCEL_PROJECT_ID), or provider.vercel.oidc_token (env:VERCEL_OIDC_TOKEN)"

// Config configures a Provider. Zero values mean the defaults: those of the embedded
// cloudapi.Config are [DefaultTimeout], [DefaultMargin], [DefaultMaxTimeout] (the longest
// timeout sent, the plan's limit), [DefaultRate], [DefaultConcurrency], [DefaultCreateTimeout] (a
// bound on a create and its wait for "running") and [DefaultRequestTimeout]; CredentialHint is
// [CredentialHint], and HTTPClient is a client with no overall timeout. A negative number is
// ErrInvalid.
type Config struct {
	cloudapi.Config

	Name string // provider name as configured; default "vercel"
	// Token is a Vercel access token, or an OIDC token (VERCEL_OIDC_TOKEN) whose claims name the
	// team and project; required, never logged.
	Token string
	// TeamID and ProjectID scope every request; taken from an OIDC token's claims when empty.
	TeamID, ProjectID string
	APIURL            string // API base; default https://vercel.com/api (it serves /v2/sandboxes)
	Image             string // image of a Create whose spec names none; default Vercel's (universal)
	// VMImage is the Docker-capable image of CreateVM (VM mode): one with dockerd and the docker
	// CLI. Required for VM mode; no default.
	VMImage string
	// VMImageHint names the setting of VMImage, for errors; default provider.vercel.vm_image.
	VMImageHint string
	// DockerHost is the local Docker engine RunInVM uploads an image from when the VM lacks it;
	// default $DOCKER_HOST, else the local socket.
	DockerHost string
	DockerWait time.Duration // bound on a VM's Docker engine start; default [DefaultDockerWait]
}

// Provider creates, finds and terminates Vercel sandboxes. It is safe for concurrent use.
type Provider struct {
	cfg      Config
	log      *slog.Logger
	api      *cloudapi.Client // the token as a bearer token
	files    *cloudapi.Client // the same, and the x-cwd header of fs/write: "/"
	creates  cloudapi.Creates
	backstop cloudapi.Backstop
	rel      cloudapi.Releaser
	missing  string // what credential is missing, "" when none

	vms keylock.Set // VM mode: one lock per VM, held while its ports change

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

// New returns a Provider for cfg. It does no I/O and never fails for a missing credential: every
// call then fails, before anything is sent, with ErrInvalid and ErrUnavailable and a message
// naming what to set (so a chain moves on). A nil logger discards; the token is never logged.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	cfg.Name, cfg.APIURL = cmp.Or(cfg.Name, DefaultName), strings.TrimRight(cmp.Or(cfg.APIURL, DefaultAPIURL), "/")
	cfg.VMImageHint = cmp.Or(cfg.VMImageHint, "provider.vercel.vm_image")
	if err := errors.Join(cfg.Defaults(cloudapi.Config{
		CredentialHint: CredentialHint,
		Timeout:        DefaultTimeout, Margin: DefaultMargin, MaxTimeout: DefaultMaxTimeout,
		Rate: DefaultRate, Concurrency: DefaultConcurrency,
		CreateTimeout: DefaultCreateTimeout, RequestTimeout: DefaultRequestTimeout,
		HTTPClient: &http.Client{},
	}), cloudapi.Default("DockerWait", &cfg.DockerWait, DefaultDockerWait)); err != nil {
		return nil, fmt.Errorf("vercel: %w", err)
	}
	if err := cloudapi.CheckImages(cfg.Image, cfg.VMImage); err != nil {
		return nil, fmt.Errorf("vercel: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hc := cfg.HTTPClient
	p := &Provider{
		cfg: cfg, log: logger.With("provider", cfg.Name),
		backstop: cloudapi.Backstop{Default: cfg.Timeout, Margin: cfg.Margin, Max: cfg.MaxTimeout},
	}
	p.resolveCredentials()
	p.api = &cloudapi.Client{Name: "vercel", Key: p.cfg.Token, KeyHint: cfg.CredentialHint, Auth: cloudapi.Bearer, Message: message, HTTP: hc}
	files := *p.api
	files.Auth = func(h http.Header, key string) {
		cloudapi.Bearer(h, key)
		h.Set("X-Cwd", "/") // the directory the tar extracts in, as the SDK's writeFiles sends it
	}
	p.files = &files
	p.rel = cloudapi.Releaser{Provider: p, Log: p.log, Timeout: cfg.RequestTimeout}
	p.creates = cloudapi.Creates{Prefix: "vercel", Gate: cloudapi.NewGate(cfg.Rate, cfg.Concurrency), Check: p.checkCredentials, Timeout: cfg.CreateTimeout}
	p.VMs = vmdocker.VMs{Prefix: "vercel", Provider: cfg.Name, Valid: cloudapi.RecordName.MatchString, Find: p.host}
	return p, nil
}

// resolveCredentials fills the team and project from an OIDC token's claims where they are not
// configured, and notes what is still missing.
func (p *Provider) resolveCredentials() {
	if p.cfg.Token != "" && (p.cfg.TeamID == "" || p.cfg.ProjectID == "") {
		if c, ok := oidcClaims(p.cfg.Token); ok {
			if p.cfg.TeamID == "" {
				p.cfg.TeamID = c.OwnerID
			}
			if p.cfg.ProjectID == "" {
				p.cfg.ProjectID = c.ProjectID
			}
		}
	}
	var missing []string
	for _, c := range []struct{ what, v string }{{"token", p.cfg.Token}, {"team id", p.cfg.TeamID}, {"project id", p.cfg.ProjectID}} {
		if c.v == "" {
			missing = append(missing, c.what)
		}
	}
	p.missing = strings.Join(missing, ", ")
}

// claims are what the SDK reads of a Vercel OIDC token (a JWT): the team and the project.
type claims struct {
	OwnerID   string `json:"owner_id"`
	ProjectID string `json:"project_id"`
}

// oidcClaims reads the claims of a JWT without verifying it, as the SDK does: Vercel verifies it.
func oidcClaims(token string) (claims, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return claims{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	var c claims
	if err != nil || json.Unmarshal(b, &c) != nil || c.OwnerID == "" {
		return claims{}, false
	}
	return c, true
}

// Name returns the configured name, "vercel" by default.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities reports sandboxes found by name after a lost answer, with a backstop lifetime
// (the sandbox's timeout).
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{ListByLabel: true, BackstopLifetime: true}
}

// Location implements agentenv.Locator: the team and project the sandboxes were created in.
func (p *Provider) Location() string {
	return fmt.Sprintf("Vercel team %s, project %s, at %s", orUnset(p.cfg.TeamID), orUnset(p.cfg.ProjectID), p.cfg.APIURL)
}

func orUnset(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}

// checkCredentials fails when a credential is missing: a configuration error (ErrInvalid:
// nothing is made) that also makes the provider unavailable, so that a chain moves on.
func (p *Provider) checkCredentials() error {
	if p.missing != "" {
		return fmt.Errorf("vercel: no %s: %s: %w: %w", p.missing, p.cfg.CredentialHint, agentenv.ErrInvalid, agentenv.ErrUnavailable)
	}
	return nil
}

// message is the message of an error answer, {"error": {"code", "message"}} as the SDK's
// base-client.ts reads it: "message (code)"; anything else as cloudapi reads it.
func message(body []byte) string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		if e.Error.Code != "" {
			return e.Error.Message + " (" + e.Error.Code + ")"
		}
		return e.Error.Message
	}
	return cloudapi.Message(body)
}

// url is the URL of path under APIURL, with query and the team.
func (p *Provider) url(path string, query url.Values) string {
	q := url.Values{}
	for k, vs := range query {
		q[k] = vs
	}
	q.Set("teamId", p.cfg.TeamID)
	return p.cfg.APIURL + path + "?" + q.Encode()
}

// call sends a JSON request (in may be nil) to path with query and decodes a 2xx JSON answer
// into out (if not nil). A non-2xx answer is an *apierr.Error.
func (p *Provider) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	if err := p.checkCredentials(); err != nil {
		return err
	}
	_, err := p.api.JSON(ctx, method, p.url(path, query), in, out)
	return err
}

// do sends body (of contentType) to path with c and returns the 2xx answer's body open.
func (p *Provider) do(ctx context.Context, c *cloudapi.Client, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	if err := p.checkCredentials(); err != nil {
		return nil, err
	}
	return c.Do(ctx, method, p.url(path, nil), body, contentType)
}

// kind maps an HTTP outcome to an agentenv error kind (see apierr.Kind); 410 (a stopped
// session) is ErrGone.
func kind(err error) error {
	if apierr.Status(err) == http.StatusGone {
		return fmt.Errorf("%w: %w", agentenv.ErrGone, err)
	}
	return apierr.Kind(err)
}

// timeout is the backstop lifetime of spec in milliseconds (Vercel's unit), never zero.
func (p *Provider) timeout(spec agentenv.SandboxSpec) int64 { return p.backstop.Seconds(spec) * 1000 }

// forget drops what this Provider keeps of sandbox name.
func (p *Provider) forget(name string) { p.vms.Forget(name) }

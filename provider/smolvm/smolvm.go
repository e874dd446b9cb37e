// Package smolvm is the agentenv provider smol_vm: smolvm machines (libkrun microVMs) through
// the local HTTP API that `smolvm serve` serves (/api/v1/machines and, under a machine, start,
// exec and files), through internal/cloudapi's client (with no key: the API has none) and no
// SDK, written from smolvm's own documentation (docs/local-api, docs/docker-in-machine) and its
// server's request and answer types.
//
// smolvm runs on this machine: its API has no authentication (whoever reaches the socket runs
// machines), listens on a Unix socket by default ($XDG_RUNTIME_DIR/smolvm.sock, else
// /tmp/smolvm.sock), and publishes a machine's ports on this host's ports, chosen at create
// and fixed then. No smolvm cloud API is documented in its repository or SDKs, so only local
// (or otherwise reachable) servers are supported.
//
// The record id is the machine's name, which the client chooses, so a create whose answer was
// lost, or whose process was killed, is found by listing the machines and matching the name.
// A machine keeps no labels (its API returns name, state, resources and ports, not even the
// environment), so agentenv's labels live in a file in the machine (labelsFile), written once
// the machine's workload runs and read back to check it is there, as smolvm's docs say to do:
// a file uploaded before the workload runs is lost although the upload answers 200. List reads
// that file of each running machine; a machine that is not running is listed only to a query
// naming its record (reading its file would start it: smolvm's exec and files routes start a
// stopped machine).
//
// The other trap smolvm's docs name is that a command failing inside the guest still answers
// HTTP 200: every exec's exitCode is read from the answer and checked, never the status.
//
// Terminate is a DELETE by name, with no connect (which would start a stopped machine); a
// machine smolvm does not list (404) counts as gone. smolvm machines are persistent and have no
// lifetime of their own: nothing but agentenv's gc (by the expiry label) bounds one whose
// creator died.
//
// An env deploys in VM mode (vm.go): one machine with no image, whose guest gets a Docker
// engine (installed with apk unless present, its data on the machine's /storage disk, as
// smolvm's docker-in-machine docs do), hosts the stack through internal/vmdocker. smolvm has
// no private network between machines, so there is no container mode; bare sandboxes (a
// task's deploy_sandbox) are machines from an image whose command is the workload.
//
// Verified only against the in-repo emulator (package smolvmemu): smolvm cannot be built here
// and no binary of it is available.
package smolvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/keylock"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// Defaults for the zero values of Config.
const (
	DefaultName           = "smol_vm"
	DefaultSlots          = 8     // ports published per VM
	DefaultSlotBase       = 20000 // guest port of a VM's first slot
	DefaultVMCPUs         = 2
	DefaultVMMemoryMB     = 4096
	DefaultVMStorageGB    = 20
	DefaultCreateTimeout  = 5 * time.Minute // a VM's boot, Docker's install and start
	DefaultRequestTimeout = 30 * time.Second
	DefaultDockerWait     = 2 * time.Minute
	DefaultAgentWait      = time.Minute
)

// DefaultURL is where `smolvm serve start` listens when given no --listen, as its docs say:
// unix://$XDG_RUNTIME_DIR/smolvm.sock, else unix:///tmp/smolvm.sock.
func DefaultURL() string {
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		return "unix://" + filepath.Join(dir, "smolvm.sock")
	}
	return "unix:///tmp/smolvm.sock"
}

// Config configures a Provider. Zero values mean the documented defaults; a negative number is
// ErrInvalid. Its numbers follow the rule of cloudapi.Default; it embeds no cloudapi.Config,
// since smolvm's local API has no key, no create rate and no sandbox lifetime to bound.
type Config struct {
	Name string // provider name as configured; default "smol_vm"
	// URL is the smolvm server: unix:///path/to/socket or http://host:port; default DefaultURL().
	URL string
	// URLHint names the setting of URL, for errors; default provider.smol_vm.url.
	URLHint string
	// PortHost is the address a machine's published ports are reached at; default 127.0.0.1
	// for a Unix socket or a loopback URL, else the URL's host.
	PortHost string
	// Image is the image of a bare sandbox whose spec names none (an OCI reference smolvm pulls);
	// no default.
	Image string
	// DockerHost is the local Docker engine RunInVM uploads an image from when the VM lacks it;
	// default $DOCKER_HOST, else the local socket.
	DockerHost string

	Slots    int // ports published per VM (fixed at create, as smolvm publishes ports); default 8
	SlotBase int // guest port of a VM's first slot; default 20000

	VMCPUs      int // vCPUs of a VM whose spec sets none; default 2
	VMMemoryMB  int // memory of a VM whose spec sets none, MiB; default 4096
	VMStorageGB int // a VM's /storage disk, where its Docker engine keeps its data; default 20

	CreateTimeout  time.Duration // bound on a create, its start and its setup; default 5m
	RequestTimeout time.Duration // bound on cleanup requests; default 30s
	DockerWait     time.Duration // bound on a VM's Docker engine start; default 2m
	AgentWait      time.Duration // bound on the wait for a started machine to run commands; default 1m
	HTTPClient     *http.Client  // default a client with no overall timeout (requests are bounded by context)
}

// Provider creates, finds and terminates smolvm machines. It is safe for concurrent use.
type Provider struct {
	cfg  Config
	log  *slog.Logger
	api  *cloudapi.Client // no key: smolvm's local API has no authentication
	rel  cloudapi.Releaser
	base string // the API's base URL, http://unix/api/v1 for a socket

	vms    keylock.Set // VM mode: one lock per VM, held while its port slots are chosen
	mu     sync.Mutex
	picked map[int]bool // host ports handed to creates whose start has not bound them yet

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

// New returns a Provider for cfg. It does no I/O: a server that cannot be reached fails each
// call with ErrInvalid and ErrUnavailable naming the URL and its setting, before anything is
// made, so that a chain moves on. A URL that is neither unix:// nor http(s):// is ErrInvalid.
// A nil logger discards.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.URL == "" {
		cfg.URL = DefaultURL()
	}
	if cfg.URLHint == "" {
		cfg.URLHint = "provider.smol_vm.url"
	}
	if err := errors.Join(
		cloudapi.Default("CreateTimeout", &cfg.CreateTimeout, DefaultCreateTimeout),
		cloudapi.Default("RequestTimeout", &cfg.RequestTimeout, DefaultRequestTimeout),
		cloudapi.Default("DockerWait", &cfg.DockerWait, DefaultDockerWait),
		cloudapi.Default("AgentWait", &cfg.AgentWait, DefaultAgentWait),
		cloudapi.Default("Slots", &cfg.Slots, DefaultSlots),
		cloudapi.Default("SlotBase", &cfg.SlotBase, DefaultSlotBase),
		cloudapi.Default("VMCPUs", &cfg.VMCPUs, DefaultVMCPUs),
		cloudapi.Default("VMMemoryMB", &cfg.VMMemoryMB, DefaultVMMemoryMB),
		cloudapi.Default("VMStorageGB", &cfg.VMStorageGB, DefaultVMStorageGB),
	); err != nil {
		return nil, fmt.Errorf("smol_vm: %w", err)
	}
	if cfg.SlotBase+cfg.Slots > 65536 || cfg.VMCPUs > 255 {
		return nil, fmt.Errorf("smol_vm: %d slots from %d, %d cpus, %d MiB, %d GiB: %w", cfg.Slots, cfg.SlotBase, cfg.VMCPUs, cfg.VMMemoryMB, cfg.VMStorageGB, agentenv.ErrInvalid)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	base, portHost := "", ""
	switch {
	case strings.HasPrefix(cfg.URL, "unix://"):
		sock := strings.TrimPrefix(cfg.URL, "unix://")
		if !filepath.IsAbs(sock) {
			return nil, fmt.Errorf("smol_vm: %s = %q: want unix:///absolute/path: %w", cfg.URLHint, cfg.URL, agentenv.ErrInvalid)
		}
		hc = unixClient(hc, sock)
		base, portHost = "http://unix", "127.0.0.1"
	case strings.HasPrefix(cfg.URL, "http://"), strings.HasPrefix(cfg.URL, "https://"):
		u, err := url.Parse(cfg.URL)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("smol_vm: %s = %q: want http://host:port: %w", cfg.URLHint, cfg.URL, agentenv.ErrInvalid)
		}
		base, portHost = strings.TrimRight(cfg.URL, "/"), u.Hostname()
		if ip := net.ParseIP(portHost); portHost == "localhost" || (ip != nil && ip.IsLoopback()) {
			portHost = "127.0.0.1"
		}
	default:
		return nil, fmt.Errorf("smol_vm: %s = %q: want unix:///path/to/smolvm.sock or http://host:port: %w", cfg.URLHint, cfg.URL, agentenv.ErrInvalid)
	}
	if cfg.PortHost == "" {
		cfg.PortHost = portHost
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Provider{cfg: cfg, log: logger.With("provider", cfg.Name), base: base + "/api/v1",
		api:    &cloudapi.Client{Name: cfg.Name, HTTP: hc},
		picked: map[int]bool{}}
	p.rel = cloudapi.Releaser{Provider: p, Log: p.log, Timeout: cfg.RequestTimeout}
	p.VMs = vmdocker.VMs{Prefix: "smol_vm", Provider: cfg.Name, Valid: validName, Find: p.host}
	return p, nil
}

// unixClient returns a copy of hc that dials the Unix socket sock for every request.
func unixClient(hc *http.Client, sock string) *http.Client {
	c := *hc
	c.Transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}
	return &c
}

// Name returns the configured name, "smol_vm" by default.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities reports machines found by name after a lost answer, on this machine when the
// server is; no backstop lifetime (smolvm machines are persistent) and no egress policy.
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{OnThisMachine: p.cfg.PortHost == "127.0.0.1", ListByLabel: true}
}

// Location implements agentenv.Locator: the smolvm server the machines were created through
// (`smolvm machine ls` there lists them).
func (p *Provider) Location() string { return "smolvm server at " + p.cfg.URL }

// machineName is what smolvm accepts as a machine name (its validate_vm_name): letters, digits,
// '_' and single '-', starting with a letter or digit, not ending with '-', at most 128.
var machineName = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9_]|-[A-Za-z0-9_])*$`)

// validName reports whether name is a machine name smolvm accepts.
func validName(name string) bool { return len(name) <= 128 && machineName.MatchString(name) }

// do sends one request to the API path and returns the 2xx answer's body open (the caller
// closes it); a non-2xx answer is an *apierr.Error with smolvm's code in its message (its
// {"error", "code"}), and a server that cannot be reached (nothing sent) is ErrInvalid and
// ErrUnavailable naming the URL and its setting.
func (p *Provider) do(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	resp, err := p.api.Do(ctx, method, p.base+path, body, contentType)
	return resp, p.unreached(ctx, err)
}

// call sends a JSON request (in may be nil) to the API path and decodes a 2xx JSON answer into
// out (if not nil), with do's errors.
func (p *Provider) call(ctx context.Context, method, path string, in, out any) error {
	_, err := p.api.JSON(ctx, method, p.base+path, in, out)
	return p.unreached(ctx, err)
}

// unreached makes err, when the server could not be dialled, say so, naming the URL and its
// setting: ErrInvalid (nothing was sent, so nothing made) and ErrUnavailable (a chain moves on).
func (p *Provider) unreached(ctx context.Context, err error) error {
	var oe *net.OpError
	if err == nil || ctx.Err() != nil || !errors.As(err, &oe) || oe.Op != "dial" {
		return err
	}
	return fmt.Errorf("no smolvm server answers at %s (start one with `smolvm serve start`, or set %s): %w: %w: %w",
		p.cfg.URL, p.cfg.URLHint, agentenv.ErrInvalid, agentenv.ErrUnavailable, err)
}

// kind maps an HTTP outcome to an agentenv error kind (see apierr.Kind); smolvm's 408 (a
// request that timed out in the server) is ErrUnavailable too.
func kind(err error) error {
	if apierr.Status(err) == http.StatusRequestTimeout {
		return fmt.Errorf("%w: %w", agentenv.ErrUnavailable, err)
	}
	return apierr.Kind(err)
}

// machinePath is the route of machine name, with suffix (such as "/exec") appended.
func machinePath(name, suffix string) string { return "/machines/" + url.PathEscape(name) + suffix }

// forget drops what this Provider keeps of machine name.
func (p *Provider) forget(name string) { p.vms.Forget(name) }

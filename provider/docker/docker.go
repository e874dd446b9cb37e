// Package docker is the agentenv provider for a local Docker engine, spoken to through the
// Engine API (github.com/moby/moby/client).
//
// A docker sandbox is everything that carries the label agentenv.record=<id>: usually one
// container named <id>, and for a network record the bridge network named <id>. The sandbox's
// ID is the record id, so Terminate, Get and List need no handle but the labels. Containers run
// with an init process, no-new-privileges, every capability dropped except SandboxSpec.CapAdd,
// and their ports published on 127.0.0.1 at host ports the engine picks.
package docker

import (
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/keylock"
)

// Config configures a Provider. Zero values mean the documented defaults.
type Config struct {
	Name          string        // provider name as configured; default "docker"
	Host          string        // engine address; default $DOCKER_HOST, else unix:///var/run/docker.sock
	StopGrace     time.Duration // time a container gets between SIGTERM and SIGKILL on stop; default 1s
	DefaultMemory int64         // memory limit in bytes when a spec sets none; 0 means no limit
	DefaultCPUs   float64       // CPU limit when a spec sets none; 0 means no limit
	DefaultPids   int64         // process limit when a spec sets none; default agentenv.DefaultPidsLimit
	// Builder is the engine's builder for Dockerfile builds: BuilderBuildKit, BuilderLegacy, or
	// "" for BuildKit where the engine has it and the legacy builder where it refuses it.
	Builder string
}

// The builders Config.Builder names.
const (
	BuilderBuildKit = "buildkit"
	BuilderLegacy   = "legacy"
)

// Provider creates, finds and terminates sandboxes on a Docker engine. It is safe for
// concurrent use, and by several processes sharing the engine.
type Provider struct {
	cfg  Config
	host string
	cli  *client.Client
	log  *slog.Logger

	netMu sync.Mutex // serialises making a VM's per-deployment networks (the engine allows two of one name)
	// detaching holds one lock per network while a container attached to it is removed.
	// docker.io 20.10 keeps a network's endpoint count with a read, change and write that can
	// lose one of two concurrent releases; the count then never drops and the network cannot
	// be removed until dockerd restarts. A deployment's containers share its network and are
	// torn down together, so their removals take turns on it.
	detaching keylock.Set
	// noBuildKit is set once the engine refused a BuildKit build (with Config.Builder empty):
	// later builds go to the legacy builder at once.
	noBuildKit atomic.Bool
}

var (
	_ agentenv.Provider  = (*Provider)(nil)
	_ agentenv.Networker = (*Provider)(nil)
	_ agentenv.Execer    = (*Provider)(nil)
	_ agentenv.Files     = (*Provider)(nil)

	_ agentenv.ImageChecker = (*Provider)(nil)
	_ agentenv.LogReader    = (*Provider)(nil)
)

// New returns a Provider for cfg. It does no I/O: the engine is first contacted, and the API
// version negotiated, by the first call that needs it. A nil logger discards.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = "docker"
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = time.Second
	}
	if cfg.DefaultMemory < 0 || cfg.DefaultCPUs < 0 || cfg.DefaultPids < 0 {
		return nil, fmt.Errorf("docker: negative default limits: %w", agentenv.ErrInvalid)
	}
	if cfg.DefaultPids == 0 {
		cfg.DefaultPids = agentenv.DefaultPidsLimit
	}
	if cfg.Builder != "" && cfg.Builder != BuilderBuildKit && cfg.Builder != BuilderLegacy {
		return nil, fmt.Errorf("docker: builder %q: want %s or %s: %w", cfg.Builder, BuilderBuildKit, BuilderLegacy, agentenv.ErrInvalid)
	}
	cli, host, err := engine.Client(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Provider{cfg: cfg, host: host, cli: cli, log: logger.With("provider", cfg.Name)}, nil
}

// Name returns the configured name, "docker" by default.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities reports what the docker provider supports: everything but a backstop lifetime
// (a local container lives until terminated; gc removes it after its expiry label) and egress
// rules; an isolated network is an internal one, with no route off the host's bridge; a
// sandbox's user is the container's.
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{OnThisMachine: true, ListByLabel: true, Isolate: true, Join: true, User: true}
}

// Client returns the Engine API client the provider uses, for callers that need more of the
// engine (tests checking leftovers, image builds).
func (p *Provider) Client() *client.Client { return p.cli }

// Host returns the engine address the provider dials.
func (p *Provider) Host() string { return p.host }

// Close releases the client's idle connections.
func (p *Provider) Close() error { return p.cli.Close() }

// containerName is what Docker accepts as a container name.
var containerName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// checkID validates a sandbox id (a record id) before it goes into a filter or a name.
func checkID(id string) error {
	if !containerName.MatchString(id) {
		return fmt.Errorf("sandbox id %q: want [a-zA-Z0-9][a-zA-Z0-9_.-]+: %w", id, agentenv.ErrInvalid)
	}
	return nil
}

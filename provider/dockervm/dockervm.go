// Package dockervm is the agentenv provider "docker_vm": a local VM-mode provider whose VM is a
// container running its own Docker engine (Docker in Docker, without --privileged: the
// capability recipe of the feasibility notes, image agentenv-dind:local built by
// images/debian/build.sh dind). It exists so that the remote-VM path (create a VM, save and load
// images into it, start the stack inside, reach it from outside) runs end to end on this machine
// with real containers. It is not a VM boundary: the outer container shares the host's kernel
// with nearly every capability and no seccomp or AppArmor confinement (README.md says what it
// isolates and what it does not); run only trusted code in it.
//
// A VM is the outer container named by its record id and labelled with the record's labels,
// plus a volume <id>-docker (same labels) that holds the inner engine's /var/lib/docker.
// Terminate removes both; the inner containers die with them.
//
// The inner engine is never published: the provider reaches it through an exec of
// `docker system dial-stdio` in the outer container (the way the docker CLI reaches an ssh://
// host), so it works with a remote outer engine too and no socket is exposed to other users.
//
// Ports: a VM's stack is started after the VM exists, and a VM's ports cannot be published
// afterwards, so CreateVM publishes Config.Slots "slot" ports of the outer container
// (SlotBase, SlotBase+1, ...) on 127.0.0.1 at host ports the engine picks. RunInVM publishes
// each port of a component on a free slot inside the VM (the inner engine's own -p), so the host
// reaches the component at the outer binding of that slot. No port is picked on the host, and
// no proxy runs in the VM; a VM holds at most Slots published ports.
package dockervm

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/keylock"
)

// Defaults for the zero values of Config.
const (
	DefaultName      = "docker_vm"
	DefaultImage     = "agentenv-dind:local"
	DefaultSlots     = 12
	DefaultSlotBase  = 20000
	DefaultReadyWait = 60 * time.Second
)

// Labels the provider adds to a VM's outer container, beside the record's own.
const (
	// labelMain names the one container of a VM made by Create (not CreateVM); the VM's state
	// is then that container's.
	labelMain = "agentenv.vm.main"
	// labelPorts maps the main container's ports to slots, "8080:20000,...", so that List
	// reads endpoints without asking the inner engine.
	labelPorts = "agentenv.vm.ports"
)

// Config configures a Provider. Zero values mean the documented defaults.
type Config struct {
	Name      string        // provider name as configured; default "docker_vm"
	Host      string        // outer engine address; default $DOCKER_HOST, else the local socket
	Image     string        // DinD image; default agentenv-dind:local
	Slots     int           // ports published per VM; default 12
	SlotBase  int           // first slot port inside the VM; default 20000
	ReadyWait time.Duration // wall-clock bound on the inner engine's start; default 60s
	Memory    int64         // memory limit of a VM in bytes; 0 means none
	CPUs      float64       // CPU limit of a VM; 0 means none
}

// Provider creates VMs on the local engine and runs stacks inside them. It is safe for
// concurrent use; several processes may share the engine (slot choice inside one VM is
// serialized only within a process, and a clash is retried once on the next free slot).
type Provider struct {
	cfg  Config
	host string
	cli  *client.Client
	log  *slog.Logger

	locks keylock.Set // per VM (and per VM+image, VM+network): slot choice, image loads, networks
}

var (
	_ agentenv.Provider = (*Provider)(nil)
	_ agentenv.VMHost   = (*Provider)(nil)
)

// New returns a Provider for cfg. It does no I/O. A nil logger discards.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.Slots == 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.SlotBase == 0 {
		cfg.SlotBase = DefaultSlotBase
	}
	if cfg.ReadyWait <= 0 {
		cfg.ReadyWait = DefaultReadyWait
	}
	if cfg.Slots < 0 || cfg.SlotBase < 1 || cfg.SlotBase+cfg.Slots > 65536 || cfg.Memory < 0 || cfg.CPUs < 0 {
		return nil, fmt.Errorf("docker_vm: slots %d from %d, memory %d, cpus %g: %w", cfg.Slots, cfg.SlotBase, cfg.Memory, cfg.CPUs, agentenv.ErrInvalid)
	}
	cli, host, err := engine.Client(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("docker_vm: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Provider{cfg: cfg, host: host, cli: cli, log: logger.With("provider", cfg.Name)}, nil
}

// Name returns the configured name, "docker_vm" by default.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities reports VM mode on this machine, with List by label and a bare sandbox's image
// built in its VM (BuildInVM, see Create); there is no container mode (no Networker) and no
// backstop lifetime (gc removes a VM after its expiry label).
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{OnThisMachine: true, ListByLabel: true, BuildInVM: true}
}

// Close releases the client's idle connections.
func (p *Provider) Close() error { return p.cli.Close() }

// forget drops the locks of vm once it is terminated.
func (p *Provider) forget(vm string) {
	p.locks.Forget(vm)
	p.locks.ForgetPrefix(vm + "\x00")
}

// name is what Docker accepts as a container name; record ids and component names are names.
var name = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// checkName validates an id or component name before it goes into a filter or a name.
func checkName(what, s string) error {
	if !name.MatchString(s) {
		return fmt.Errorf("%s %q: want [a-zA-Z0-9][a-zA-Z0-9_.-]+: %w", what, s, agentenv.ErrInvalid)
	}
	return nil
}

package smolvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// dockerSetup readies a VM's Docker engine as smolvm's docker-in-machine docs do: the engine
// (apk's docker package, unless the guest has dockerd) keeps its data, and containerd its
// snapshots, on the machine's /storage disk, bind-mounted over /var/lib/docker and
// /var/lib/containerd on every start (nested overlayfs cannot sit on the guest's own overlay
// root). It prints "up" when the engine already answers, else it leaves dockerd to be started.
const dockerSetup = `set -e
if docker info >/dev/null 2>&1; then echo up; exit 0; fi
if ! command -v dockerd >/dev/null 2>&1; then
  apk add --no-cache docker >/tmp/agentenv-apk.log 2>&1 || { tail -n 20 /tmp/agentenv-apk.log >&2; exit 1; }
fi
mkdir -p /storage/docker /storage/containerd /var/lib/docker /var/lib/containerd
mountpoint -q /var/lib/docker || mount --bind /storage/docker /var/lib/docker
mountpoint -q /var/lib/containerd || mount --bind /storage/containerd /var/lib/containerd
rm -f /var/run/docker.pid`

// dockerLog is where a VM's dockerd writes.
const dockerLog = "/var/log/agentenv-dockerd.log"

// Abilities reports exec, files, VM mode (with commands in a VM's containers) and a location;
// no private networks, so no container mode of a whole env.
func (p *Provider) Abilities() agentenv.Abilities {
	return agentenv.Abilities{Execer: p, Files: p, VMHost: p, VMExecer: p, Locator: p}
}

// CreateVM implements agentenv.VMHost: a machine with no image (its guest is smolvm's own Linux,
// where exec runs), networked, named and labelled as Create's, with Config.Slots guest ports
// from Config.SlotBase published on free ports of this host (smolvm publishes ports at create
// only; RunInVM hands them to the stack's containers), then its Docker engine set up and started
// (dockerSetup, then dockerd as a background exec, smolvm's way of running a daemon). It
// returns once `docker info` answers (bounded by DockerWait), and deletes the machine if it
// does not.
func (p *Provider) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	vm := spec
	vm.Ports, vm.Files, vm.Command, vm.Image = nil, nil, nil, ""
	if err := p.check(vm); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("smol_vm: create vm %s: %w", spec.Name, err)
	}
	guest := make([]int, p.cfg.Slots)
	for i := range guest {
		guest[i] = p.cfg.SlotBase + i
	}
	cpus, mem := p.cfg.VMCPUs, int64(p.cfg.VMMemoryMB)
	if spec.CPUs > 0 {
		cpus = int(min(255, max(1, spec.CPUs+0.999)))
	}
	if spec.Memory > 0 {
		mem = spec.Memory >> 20
	}
	req := createRequest{Name: spec.Name, CPUs: cpus, MemoryMB: mem, StorageGB: p.cfg.VMStorageGB, Network: true}
	labels := spec.LabelsWithExpiry()
	labels[labelMode] = modeVM
	mi, err := p.create(ctx, req, guest, labels, func(ctx context.Context) error { return p.startDocker(ctx, spec.Name) })
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	return p.sandbox(mi, labels, nil), nil
}

// startDocker runs dockerSetup in vm, starts dockerd unless it answered already, and waits for
// `docker info`, bounded by DockerWait.
func (p *Provider) startDocker(ctx context.Context, vm string) error {
	res, err := p.exec(ctx, vm, execRequest{Command: []string{"/bin/sh", "-c", dockerSetup}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		return fmt.Errorf("docker setup: %w", err)
	}
	if strings.TrimSpace(string(res.Stdout)) != "up" {
		start := "exec dockerd --storage-driver=overlay2 >" + dockerLog + " 2>&1"
		res, err := p.exec(ctx, vm, execRequest{Command: []string{"/bin/sh", "-c", start}, Background: true})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		if err != nil {
			return fmt.Errorf("start dockerd: %w", err)
		}
	}
	if err := vmdocker.AwaitEngine(ctx, vmShell{p, vm}, p.cfg.DockerWait); err != nil {
		log, _ := p.exec(ctx, vm, execRequest{Command: []string{"tail", "-n", "20", dockerLog}})
		return fmt.Errorf("%w (dockerd's log: %s)", err, strings.TrimSpace(string(log.Stdout)))
	}
	return nil
}

// vmInfo returns VM vm's machine and labels; a VM smolvm does not list, or that is not running,
// is ErrGone; a machine CreateVM did not make, ErrInvalid.
func (p *Provider) vmInfo(ctx context.Context, vm string) (machineInfo, map[string]string, error) {
	if !validName(vm) {
		return machineInfo{}, nil, fmt.Errorf("vm %q: no such machine: %w: %w", vm, agentenv.ErrNotFound, agentenv.ErrGone)
	}
	mi, err := p.info(ctx, vm)
	if errors.Is(err, agentenv.ErrNotFound) {
		return machineInfo{}, nil, fmt.Errorf("%w: %w", err, agentenv.ErrGone)
	}
	if err != nil {
		return machineInfo{}, nil, err
	}
	if mi.State != stateRunning {
		return mi, nil, fmt.Errorf("vm %s is %s: %w", vm, mi.State, agentenv.ErrGone)
	}
	f, err := p.readFacts(ctx, vm)
	if err != nil {
		return mi, nil, err
	}
	if f.labels[labelMode] != modeVM {
		return mi, nil, fmt.Errorf("machine %s is not a VM made by CreateVM: %w", vm, agentenv.ErrInvalid)
	}
	labels := maps.Clone(f.labels)
	delete(labels, labelMode)
	return mi, labels, nil
}

// slots returns mi's published slots, guest port to host port, and the guest ports in order.
func (p *Provider) slots(mi machineInfo) (map[int]int, []int) {
	hostOf := map[int]int{}
	var pool []int
	for _, ps := range mi.Ports {
		if ps.Guest >= p.cfg.SlotBase && ps.Guest < p.cfg.SlotBase+p.cfg.Slots {
			hostOf[ps.Guest] = ps.Host
			pool = append(pool, ps.Guest)
		}
	}
	slices.Sort(pool)
	return hostOf, pool
}

// host is VM vm as vmdocker drives it for the embedded vmdocker.VMs (RunInVM, RemoveFromVM,
// ExecInVM): its root shell through smolvm's exec and files routes, its labels, and its ports.
// Each of a container's ports is published on a free slot of the VM (a guest port smolvm
// published at create), chosen and taken under a lock per VM (the whole RunIn holds it), and
// reached at that slot's host port. An image the VM lacks is uploaded from this host's Docker
// engine (Config.DockerHost) through the files route, and one missing from both is ErrInvalid
// naming it (nothing is pulled); spec.Files go up the same way. A VM that is gone is ErrGone, a
// machine CreateVM did not make ErrInvalid (vmInfo).
func (p *Provider) host(ctx context.Context, vm string) (vmdocker.Host, error) {
	mi, labels, err := p.vmInfo(ctx, vm)
	if err != nil {
		return vmdocker.Host{}, err
	}
	hostOf, pool := p.slots(mi)
	sh := vmShell{p, vm}
	return vmdocker.Host{Shell: sh, Labels: labels, Cleanup: p.cfg.RequestTimeout, Log: p.log.With("vm", vm),
		Images: vmdocker.Images{DockerHost: p.cfg.DockerHost, Hint: imageHint},
		URL:    func(slot int) string { return net.JoinHostPort(p.cfg.PortHost, strconv.Itoa(hostOf[slot])) },
		Slots: func(ctx context.Context, ports []int) (map[int]int, error) {
			res, err := sh.Run(ctx, vmdocker.UsedPortsScript)
			if err != nil {
				return nil, fmt.Errorf("list the stack's ports: %w", err)
			}
			return vmdocker.PickSlots(pool, vmdocker.ParseUsedPorts(string(res.Stdout)), ports)
		},
		Lock: func() func() { return p.vms.Lock(vm) },
	}, nil
}

// imageHint says, in a missing image's error, where smol_vm gets its images.
const imageHint = "smol_vm uploads images from this host's Docker engine ($DOCKER_HOST); load or build the image there"

// vmShell is vm's root shell through smolvm's exec and files routes.
type vmShell struct {
	p  *Provider
	vm string
}

// Run runs script in the VM's guest; a VM smolvm no longer lists is ErrGone.
func (s vmShell) Run(ctx context.Context, script string) (agentenv.ExecResult, error) {
	res, err := s.p.exec(ctx, s.vm, execRequest{Command: []string{"/bin/sh", "-c", script}})
	if errors.Is(err, agentenv.ErrNotFound) {
		err = fmt.Errorf("vm %s: %w: %w", s.vm, agentenv.ErrGone, err)
	}
	return res, err
}

// Put streams r to file in the VM; smolvm's answer must count every byte.
func (s vmShell) Put(ctx context.Context, file string, r io.Reader) error {
	return s.p.put(ctx, s.vm, file, r)
}

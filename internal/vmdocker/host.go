package vmdocker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// Host is one VM of a VM-mode cloud provider as RunIn and ExecIn drive it: its shell, the labels
// its containers carry, where it gets images, and how its published ports are reached. A provider
// whose VMs are reached only through its cloud's API (vercel) builds one per call of its
// VMHost and VMExecer methods.
type Host struct {
	Shell  Shell
	Labels map[string]string // the VM's labels; a container carries them, its spec's over them
	Images Images
	// Publish makes the VM ports a container published reachable from the caller (a cloud's
	// exposed ports or routes) and returns the URL of each VM port; nil when URL alone does.
	Publish func(ctx context.Context, published map[int]int) (url func(vmPort int) string, err error)
	// URL is the URL of a VM port when Publish is nil.
	URL func(vmPort int) string
	// Slots, when not nil, chooses the VM port of each of a container's ports (see Run.Slots),
	// for a VM whose ports are published at its create (smol_vm); nil lets the VM's engine pick.
	// Lock serializes RunIn on one VM while slots are chosen and taken.
	Slots func(ctx context.Context, ports []int) (map[int]int, error)
	// Lock, when not nil, locks the VM for a whole RunIn and returns the unlock (a VM with Slots).
	Lock func() (unlock func())
	// Cleanup bounds the removal of a container that failed to start, and of a stdin file.
	Cleanup time.Duration
	Log     *slog.Logger
}

// RunIn starts spec as a container of the VM's stack (Prepare, then Start), publishes its ports
// (Publish) and returns it as provider's sandbox, holding h.Lock if set; on any error it removes
// the container (on a cleanup context bounded by h.Cleanup) and returns the error.
func RunIn(ctx context.Context, h Host, provider string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if h.Lock != nil {
		defer h.Lock()()
	}
	archive, err := Prepare(spec)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	log := h.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	labels := maps.Clone(h.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, spec.Labels)
	run := Run{Spec: spec, Labels: labels}
	if h.Slots != nil && len(spec.Ports) > 0 {
		if run.Slots, err = h.Slots(ctx, spec.Ports); err != nil {
			return agentenv.Sandbox{}, err
		}
	}
	st, err := Start(ctx, h.Shell, run, archive, h.Images, log)
	url := h.URL
	if err == nil && h.Publish != nil && len(spec.Ports) > 0 {
		url, err = h.Publish(ctx, st.Ports)
	}
	if err != nil {
		cctx, cancel := cleanup.Context(ctx, h.Cleanup)
		defer cancel()
		if rerr := Remove(cctx, h.Shell, spec.Name); rerr != nil {
			log.Warn("remove a container that failed to start; it goes with the vm", "container", spec.Name, "err", rerr)
		}
		return agentenv.Sandbox{}, err
	}
	if url == nil {
		url = func(int) string { return "" }
	}
	return Sandbox(st, spec, provider, labels, url), nil
}

// ExecIn runs argv in container name of the VM's stack with env, and stdin, which goes to a
// file in the VM first (Shell.Put: a cloud's exec takes no stdin) removed afterwards. A
// container that does not exist is agentenv.ErrNotFound; a VM that is gone, the shell's
// agentenv.ErrGone.
func ExecIn(ctx context.Context, h Host, name string, argv []string, env map[string]string, stdin []byte) (agentenv.ExecResult, error) {
	file := ""
	if stdin != nil {
		file = "/tmp/agentenv-stdin-" + rand.Text()
		if err := h.Shell.Put(ctx, file, strings.NewReader(string(stdin))); err != nil {
			return agentenv.ExecResult{}, fmt.Errorf("stdin: %w", err)
		}
		defer func() {
			cctx, cancel := cleanup.Context(ctx, h.Cleanup)
			defer cancel()
			if _, err := h.Shell.Run(cctx, "rm -f "+file); err != nil && !errors.Is(err, agentenv.ErrGone) && h.Log != nil {
				h.Log.Warn("remove a command's stdin file in the vm; it goes with the vm", "file", file, "err", err)
			}
		}()
	}
	res, err := h.Shell.Run(ctx, ExecScript(name, argv, env, file))
	if err != nil {
		return agentenv.ExecResult{}, err
	}
	if res.ExitCode != 0 && NoSuchContainer(res.Stderr) {
		return res, fmt.Errorf("no container %s: %w", name, agentenv.ErrNotFound)
	}
	return res, nil
}

// AwaitEngine waits until `docker info` answers in the VM behind sh, polling every half second,
// bounded by wait. A VM that is gone (agentenv.ErrGone) or a cloud that does not answer
// (agentenv.ErrUnavailable) ends the wait at once.
func AwaitEngine(ctx context.Context, sh Shell, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		res, err := sh.Run(ctx, "docker info >/dev/null")
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		if err != nil && (errors.Is(err, agentenv.ErrGone) || errors.Is(err, agentenv.ErrUnavailable)) {
			return fmt.Errorf("docker engine: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("docker engine did not answer within %s (%v): %w", wait, err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

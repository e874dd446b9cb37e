//go:build integration

package modal_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/modal"
	"github.com/agentenv/agentenv/provider/modal/modalemu"
	"github.com/agentenv/agentenv/provider/providertest"
)

// newVMEmulator starts the emulator whose VM sandboxes are real DinD VMs (internal/emuvm, no
// preloaded images) and points the SDK at it. Everything it makes carries the returned labels;
// the test fails if anything labelled so, or anything of the emulator, is left on the engine,
// or if the emulator still runs a sandbox when the test ends.
func newVMEmulator(t *testing.T) (*modalemu.Server, map[string]string) {
	t.Helper()
	emu, _, labels := dockerEmulator(t, true)
	return emu, labels
}

// quiet drops the SDK's warning, on every exec, that it dials the emulator's command router
// without TLS verification.
type quiet struct{ slog.Handler }

func (q quiet) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "Using insecure TLS") {
		return nil
	}
	return q.Handler.Handle(ctx, r)
}

func (q quiet) WithAttrs(as []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(as)} }
func (q quiet) WithGroup(name string) slog.Handler    { return quiet{q.Handler.WithGroup(name)} }

// newEmuVMProvider is a modal_vm provider for the emulator of newVMEmulator, logging warnings
// to t.
func newEmuVMProvider(t *testing.T) *modal.Provider {
	t.Helper()
	p, err := modal.NewVM(modal.Config{TokenID: "ak-test", TokenSecret: "as-test", VMImage: emuvm.DefaultImage},
		slog.New(quiet{slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestVMConformance runs the provider suite against modal_vm: each sandbox is a VM whose one
// container runs the suite's workload, its image uploaded into the VM through exec stdin. The
// VM of a sandbox whose container has exited still runs, so List reports it exited with its
// exit code (no FinishedUnlisted).
func TestVMConformance(t *testing.T) {
	start := time.Now()
	image := dockertest.TestImage(t)
	_, labels := newVMEmulator(t)
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return newEmuVMProvider(t) }, providertest.Options{
		Image:       image,
		Command:     []string{"serve", ":8080"},
		Port:        8080,
		ExitCommand: []string{"exit", "3"},
		ExitCode:    3,
		Labels:      labels,
		Wait:        60 * time.Second,
	})
	t.Logf("suite took %s", time.Since(start).Round(time.Millisecond))
}

// TestVMCreateCancelledInVM cancels a bare Create on modal_vm as the k-th exec in its VM
// starts, for each of them in turn (starting dockerd, waiting for it, the image check and
// upload, the stack's network, the container's start): the suite cancels Create only while the
// VM is being made. Each Create either wins the race or returns context.Canceled with its VM
// terminated: nothing listed, nothing running in the emulator.
func TestVMCreateCancelledInVM(t *testing.T) {
	start := time.Now()
	image := dockertest.TestImage(t)
	emu, labels := newVMEmulator(t)
	p := newEmuVMProvider(t)
	spec := func(id string) agentenv.SandboxSpec {
		l := map[string]string{agentenv.LabelRecord: id}
		for k, v := range labels {
			l[k] = v
		}
		return agentenv.SandboxSpec{Name: id, Image: image, Command: []string{"serve", ":8080"}, Ports: []int{8080},
			Labels: l, Expires: time.Now().Add(time.Hour)}
	}
	cancelled := 0
	for k := 1; ; k++ {
		id := providertest.NewID()
		ctx, cancel := context.WithCancel(t.Context())
		base := emu.Calls("TaskExecStart")
		go func() {
			deadline := time.Now().Add(time.Minute)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if emu.Calls("TaskExecStart") >= base+k {
					cancel()
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		sb, err := p.Create(ctx, spec(id))
		cancel()
		if err == nil {
			t.Logf("exec %d: Create won the race; %d cancelled in the vm", k, cancelled)
			if err := p.Terminate(t.Context(), sb.ID); err != nil {
				t.Errorf("Terminate(%s) = %v", sb.ID, err)
			}
			if k < 6 {
				t.Errorf("Create was cancelled at exec %d only; want it cancelled at each of its 6 or more execs", k)
			}
			break
		}
		cancelled++
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Create cancelled at exec %d = %v, want context.Canceled", k, err)
		}
		if sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: id}); err != nil || len(sbs) != 0 {
			t.Errorf("List(record=%s) after Create cancelled at exec %d = %v, %v; want none", id, k, sbs, err)
		}
		if running := strings.Join(emu.Running(), " "); strings.Contains(running, "("+id+")") {
			t.Errorf("record %s runs in the emulator after Create cancelled at exec %d: %s", id, k, running)
		}
		if k > 20 {
			t.Fatalf("Create still cancelled at exec %d", k)
		}
	}
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

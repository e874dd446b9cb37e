package vmdocker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// vms is a VMs over one VM, "vm-1", whose shell is sh; any other VM is gone.
func vms(sh *scriptShell, finds *int) vmdocker.VMs {
	return vmdocker.VMs{Prefix: "acme", Provider: "acme-eu", Valid: func(n string) bool { return n != "" && !strings.Contains(n, "/") },
		Find: func(_ context.Context, vm string) (vmdocker.Host, error) {
			*finds++
			if vm != "vm-1" {
				return vmdocker.Host{}, fmt.Errorf("vm %s: %w", vm, agentenv.ErrGone)
			}
			return vmdocker.Host{Shell: sh, Labels: map[string]string{agentenv.LabelRecord: "vm-1"}, URL: func(int) string { return "u" }}, nil
		}}
}

func TestVMsRunRemoveAndExecThroughTheVMFound(t *testing.T) {
	finds := 0
	sh := &scriptShell{out: agentenv.ExecResult{Stdout: []byte("cid\nstate true 0\n")}}
	v := vms(sh, &finds)
	sb, err := v.RunInVM(t.Context(), "vm-1", agentenv.SandboxSpec{Name: "gw", Image: "img"})
	if err != nil || sb.Provider != "acme-eu" || sb.Labels[agentenv.LabelRecord] != "vm-1" {
		t.Errorf("RunInVM = %+v, %v; want the container as acme-eu's sandbox with the VM's labels", sb, err)
	}
	if _, err := v.RunInVM(t.Context(), "vm-2", agentenv.SandboxSpec{Name: "gw", Image: "img"}); !errors.Is(err, agentenv.ErrGone) || !strings.HasPrefix(err.Error(), "acme: run gw in vm-2: ") {
		t.Errorf("RunInVM in a gone VM = %v, want ErrGone prefixed", err)
	}
	if err := v.RemoveFromVM(t.Context(), "vm-2", "gw"); err != nil {
		t.Errorf("RemoveFromVM in a gone VM = %v, want nil", err)
	}
	if err := v.RemoveFromVM(t.Context(), "vm-1", "gw"); err != nil || sh.scripts[len(sh.scripts)-1] != vmdocker.RemoveScript("gw") {
		t.Errorf("RemoveFromVM = %v after %q, want RemoveScript run", err, sh.scripts)
	}
	sh.out = agentenv.ExecResult{ExitCode: 1, Stderr: []byte("Error: No such container: gw")}
	if res, err := v.ExecInVM(t.Context(), "vm-1", "gw", []string{"true"}, nil, nil); !errors.Is(err, agentenv.ErrNotFound) || res.ExitCode != 1 ||
		!strings.HasPrefix(err.Error(), "acme: exec in vm-1 of gw: ") {
		t.Errorf("ExecInVM of a missing container = %+v, %v; want its result and ErrNotFound prefixed", res, err)
	}
	if _, err := v.ExecInVM(t.Context(), "vm-2", "gw", []string{"true"}, nil, nil); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("ExecInVM in a gone VM = %v, want ErrGone", err)
	}
}

func TestVMsRefuseBadNamesBeforeAskingTheVM(t *testing.T) {
	finds := 0
	v := vms(&scriptShell{}, &finds)
	errs := []error{
		func() error {
			_, err := v.RunInVM(t.Context(), "vm-1", agentenv.SandboxSpec{Name: "a/b", Image: "img"})
			return err
		}(),
		func() error { _, err := v.RunInVM(t.Context(), "vm-1", agentenv.SandboxSpec{Name: "gw"}); return err }(),
		v.RemoveFromVM(t.Context(), "vm-1", "a/b"),
		func() error { _, err := v.ExecInVM(t.Context(), "vm-1", "gw", nil, nil, nil); return err }(),
	}
	for i, err := range errs {
		if !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("case %d = %v, want ErrInvalid", i, err)
		}
	}
	if finds != 0 {
		t.Errorf("the VM was looked up %d times for bad names, want none", finds)
	}
}

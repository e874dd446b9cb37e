package modal_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/modal"
)

func newVMProvider(t *testing.T, cfg modal.Config) *modal.Provider {
	t.Helper()
	if cfg.TokenID == "" && cfg.TokenSecret == "" {
		cfg.TokenID, cfg.TokenSecret = "ak-test", "as-test"
	}
	p, err := modal.NewVM(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func vmSpec(id string) agentenv.SandboxSpec {
	return agentenv.SandboxSpec{Name: id, Labels: map[string]string{agentenv.LabelRecord: id}}
}

// TestVMModeBadInputCreatesNothing: VM mode without credentials, with an unknown region, with
// bad specs, and the calls of one mode on a provider of the other, fail with a clear error
// before anything is created.
func TestVMModeBadInputCreatesNothing(t *testing.T) {
	emu := emulator(t)
	ctx := t.Context()

	if _, err := modal.NewVM(modal.Config{TokenID: "a", TokenSecret: "b", Regions: []string{"mars-1"}}, nil); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "mars-1") {
		t.Errorf("NewVM with an unknown region = %v, want ErrInvalid naming it", err)
	}
	if _, err := modal.NewVM(modal.Config{TokenID: "a", TokenSecret: "b", SlotBase: 65530}, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("NewVM with slots past port 65535 = %v, want ErrInvalid", err)
	}
	nocreds, err := modal.NewVM(modal.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if nocreds.Name() != "modal_vm" {
		t.Errorf("Name = %q, want modal_vm", nocreds.Name())
	}
	if _, err := nocreds.CreateVM(ctx, vmSpec("vm-nocreds")); !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "provider.modal_vm.token_id") {
		t.Errorf("CreateVM without credentials = %v, want ErrUnavailable naming provider.modal_vm.token_id", err)
	}

	vmp := newVMProvider(t, modal.Config{})
	if c := vmp.Capabilities(); !c.ListByLabel || !c.BackstopLifetime {
		t.Errorf("VM-mode capabilities = %+v, want listed by label, with a backstop", c)
	}
	if a := agentenv.AbilitiesOf(vmp); a.VMHost == nil || a.Networker != nil {
		t.Errorf("VM-mode abilities = %v, want VMs and no private networks", a.List())
	}
	onNet := spec("sb-bare")
	onNet.Network = "net-1"
	if _, err := vmp.Create(ctx, onNet); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "VM mode") {
		t.Errorf("Create on a network on modal_vm = %v, want ErrInvalid saying it is VM mode", err)
	}
	tooMany := spec("sb-ports")
	tooMany.Ports = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	noImage := spec("sb-noimage")
	noImage.Image = ""
	badPort := spec("sb-badport")
	badPort.Ports = []int{70000}
	mismatched := spec("sb-mismatched")
	mismatched.Labels[agentenv.LabelRecord] = "other"
	for name, sp := range map[string]agentenv.SandboxSpec{
		"more ports than slots": tooMany, "no image": noImage, "bad port": badPort,
		"record label not its name": mismatched, "bad name": spec("no/slash"),
	} {
		if _, err := vmp.Create(ctx, sp); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("Create on modal_vm with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := vmp.CreateNetwork(ctx, agentenv.NetworkSpec{Name: "net-1", Labels: map[string]string{agentenv.LabelRecord: "net-1"}}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("CreateNetwork on modal_vm = %v, want ErrInvalid", err)
	}
	bad := vmSpec("vm-badlabel")
	bad.Labels[agentenv.LabelRecord] = "other"
	if _, err := vmp.CreateVM(ctx, bad); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("CreateVM with a record label not its name = %v, want ErrInvalid", err)
	}
	withPorts := vmSpec("vm-ports")
	withPorts.Ports = []int{8080}
	if _, err := vmp.CreateVM(ctx, withPorts); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("CreateVM with ports = %v, want ErrInvalid", err)
	}
	for name, sp := range map[string]agentenv.SandboxSpec{
		"no image":      {Name: "notes"},
		"bad name":      {Name: "no/slash", Image: image},
		"bad port":      {Name: "notes", Image: image, Ports: []int{70000}},
		"relative file": {Name: "notes", Image: image, Files: map[string][]byte{"agentenv": []byte("x")}},
	} {
		if _, err := vmp.RunInVM(ctx, "sb-whatever", sp); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("RunInVM with %s = %v, want ErrInvalid", name, err)
		}
	}
	if err := vmp.RemoveFromVM(ctx, "sb-whatever", "no/slash"); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("RemoveFromVM of a bad name = %v, want ErrInvalid", err)
	}

	cp := newProvider(t, modal.Config{Region: "us-east-1"})
	if a := agentenv.AbilitiesOf(cp); a.VMHost != nil || a.Networker == nil {
		t.Errorf("container-mode abilities = %v, want container mode only", a.List())
	}
	if _, err := cp.CreateVM(ctx, vmSpec("vm-oncontainer")); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "modal_vm") {
		t.Errorf("CreateVM on container-mode modal = %v, want ErrInvalid naming modal_vm", err)
	}
	if _, err := cp.RunInVM(ctx, "sb-whatever", agentenv.SandboxSpec{Name: "notes", Image: image}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("RunInVM on container-mode modal = %v, want ErrInvalid", err)
	}
	if err := cp.RemoveFromVM(ctx, "sb-whatever", "notes"); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("RemoveFromVM on container-mode modal = %v, want ErrInvalid", err)
	}
	for _, m := range []string{"SandboxCreate", "TaskExecStart"} {
		if n := emu.Calls(m); n != 0 {
			t.Errorf("%s called %d times, want 0", m, n)
		}
	}
}

// TestVMWithoutDockerIsTerminated: a VM whose image has no Docker engine (the in-memory
// emulator runs no commands) fails CreateVM, and a bare Create, and the sandbox each made is
// terminated.
func TestVMWithoutDockerIsTerminated(t *testing.T) {
	emu := emulator(t)
	p := newVMProvider(t, modal.Config{})
	_, err := p.CreateVM(t.Context(), vmSpec("vm-nodocker"))
	if err == nil || !strings.Contains(err.Error(), "start docker") {
		t.Fatalf("CreateVM of an image without docker = %v, want a start docker error", err)
	}
	_, err = p.Create(t.Context(), spec("sb-nodocker"))
	if err == nil || !strings.Contains(err.Error(), "start docker") {
		t.Fatalf("Create on modal_vm of an image without docker = %v, want a start docker error", err)
	}
	if n := emu.Calls("SandboxCreate"); n != 2 {
		t.Errorf("SandboxCreate called %d times, want 2", n)
	}
	if left := emu.Running(); len(left) != 0 {
		t.Errorf("the emulator runs %v after the failed CreateVM", left)
	}
	sbs, err := p.List(t.Context(), nil)
	if err != nil || len(sbs) != 0 {
		t.Errorf("List = %v, %v; want none", sbs, err)
	}
}

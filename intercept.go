package agentenv

import (
	"context"
)

// The optional abilities, each the interface of the same name.
const (
	AbilityNetworks Ability = "networks" // Networker: private networks, so container mode
	AbilityVMs      Ability = "vms"      // VMHost: VMs that host a stack, so VM mode
	AbilityVMExec   Ability = "vm_exec"  // VMExecer: commands in a container of a VM's stack
	AbilityExec     Ability = "exec"     // Execer: commands in a sandbox
	AbilityAttach   Ability = "attach"   // Attacher: a process in a sandbox with its stdio attached
	AbilityFiles    Ability = "files"    // Files: reading and writing a sandbox's files
	AbilityImages   Ability = "images"   // ImageChecker: images checked before a deploy
	AbilityLogs     Ability = "logs"     // LogReader: a sandbox's output, for error messages
	AbilityLocation Ability = "location" // Locator: where the sandboxes are, for warnings
	// AbilityImageBuild is Imager: images built from a base with files added, such as a
	// snapshot of a service DB, which the provider's own sandboxes then run.
	AbilityImageBuild Ability = "image_build"
	// AbilityVolumes is Volumer: volumes that several sandboxes mount (SandboxSpec.Mounts).
	AbilityVolumes Ability = "volumes"
)

// Interceptor runs call, the provider operation op on behalf of a caller, and returns its error;
// it may add to the call (recover a panic, inject a fault, bound it) but must call call at most
// once and return its error unless it decides the outcome itself. ctx is the operation's
// context, which the interceptor may replace for call.
type Interceptor func(ctx context.Context, op string, call func(context.Context) error) error

// Operation names an Interceptor sees, one per method that does I/O.
const (
	OpCreate        = "create"
	OpGet           = "get"
	OpTerminate     = "terminate"
	OpList          = "list"
	OpCreateNetwork = "create_network"
	OpCreateVM      = "create_vm"
	OpRunInVM       = "run_in_vm"
	OpRemoveFromVM  = "remove_from_vm"
	OpExecInVM      = "exec_in_vm"
	OpExec          = "exec"
	OpAttach        = "attach"
	OpWriteFile     = "write_file"
	OpReadFile      = "read_file"
	OpEnsureImage   = "ensure_image"
	OpLogs          = "logs"
	OpCreateImage   = "create_image"
	OpCreateVolume  = "create_volume"
)

// Ops returns every operation name an Interceptor sees.
func Ops() []string {
	return []string{OpCreate, OpGet, OpTerminate, OpList, OpCreateNetwork, OpCreateVM, OpRunInVM,
		OpRemoveFromVM, OpExecInVM, OpExec, OpAttach, OpWriteFile, OpReadFile, OpEnsureImage, OpLogs, OpCreateImage, OpCreateVolume}
}

// Intercept returns p with every operation, of the Provider interface and of each ability p
// has, run through f. The result has exactly p's abilities (it is an Abler), so a decorator
// built on it cannot lose one; Name, Capabilities and Location, which do no I/O, pass through.
func Intercept(p Provider, f Interceptor) Provider {
	in := AbilitiesOf(p)
	w := &intercepted{p: p, f: f}
	if in.Networker != nil {
		w.abilities.Networker = icNetworker{in.Networker, f}
	}
	if in.VMHost != nil {
		w.abilities.VMHost = icVMHost{in.VMHost, f}
	}
	if in.VMExecer != nil {
		w.abilities.VMExecer = icVMExecer{in.VMExecer, f}
	}
	if in.Execer != nil {
		w.abilities.Execer = icExecer{in.Execer, f}
	}
	if in.Attacher != nil {
		w.abilities.Attacher = icAttacher{in.Attacher, f}
	}
	if in.Files != nil {
		w.abilities.Files = icFiles{in.Files, f}
	}
	if in.ImageChecker != nil {
		w.abilities.ImageChecker = icImages{in.ImageChecker, f}
	}
	if in.LogReader != nil {
		w.abilities.LogReader = icLogs{in.LogReader, f}
	}
	if in.Imager != nil {
		w.abilities.Imager = icImager{in.Imager, f}
	}
	if in.Volumer != nil {
		w.abilities.Volumer = icVolumer{in.Volumer, f}
	}
	w.abilities.Locator = in.Locator
	return w
}

type intercepted struct {
	p         Provider
	f         Interceptor
	abilities Abilities
}

func (w *intercepted) Name() string               { return w.p.Name() }
func (w *intercepted) Capabilities() Capabilities { return w.p.Capabilities() }
func (w *intercepted) Abilities() Abilities       { return w.abilities }

func (w *intercepted) Create(ctx context.Context, spec SandboxSpec) (sb Sandbox, err error) {
	err = w.f(ctx, OpCreate, func(ctx context.Context) (err error) { sb, err = w.p.Create(ctx, spec); return })
	return sb, err
}

func (w *intercepted) Get(ctx context.Context, id string) (sb Sandbox, err error) {
	err = w.f(ctx, OpGet, func(ctx context.Context) (err error) { sb, err = w.p.Get(ctx, id); return })
	return sb, err
}

func (w *intercepted) Terminate(ctx context.Context, id string) error {
	return w.f(ctx, OpTerminate, func(ctx context.Context) error { return w.p.Terminate(ctx, id) })
}

func (w *intercepted) List(ctx context.Context, labels map[string]string) (sbs []Sandbox, err error) {
	err = w.f(ctx, OpList, func(ctx context.Context) (err error) { sbs, err = w.p.List(ctx, labels); return })
	return sbs, err
}

type icNetworker struct {
	x Networker
	f Interceptor
}

func (w icNetworker) CreateNetwork(ctx context.Context, spec NetworkSpec) (sb Sandbox, err error) {
	err = w.f(ctx, OpCreateNetwork, func(ctx context.Context) (err error) { sb, err = w.x.CreateNetwork(ctx, spec); return })
	return sb, err
}

type icVMHost struct {
	x VMHost
	f Interceptor
}

func (w icVMHost) CreateVM(ctx context.Context, spec SandboxSpec) (sb Sandbox, err error) {
	err = w.f(ctx, OpCreateVM, func(ctx context.Context) (err error) { sb, err = w.x.CreateVM(ctx, spec); return })
	return sb, err
}

func (w icVMHost) RunInVM(ctx context.Context, vm string, spec SandboxSpec) (sb Sandbox, err error) {
	err = w.f(ctx, OpRunInVM, func(ctx context.Context) (err error) { sb, err = w.x.RunInVM(ctx, vm, spec); return })
	return sb, err
}

func (w icVMHost) RemoveFromVM(ctx context.Context, vm, name string) error {
	return w.f(ctx, OpRemoveFromVM, func(ctx context.Context) error { return w.x.RemoveFromVM(ctx, vm, name) })
}

type icVMExecer struct {
	x VMExecer
	f Interceptor
}

func (w icVMExecer) ExecInVM(ctx context.Context, vm, name string, argv []string, env map[string]string, stdin []byte) (res ExecResult, err error) {
	err = w.f(ctx, OpExecInVM, func(ctx context.Context) (err error) {
		res, err = w.x.ExecInVM(ctx, vm, name, argv, env, stdin)
		return
	})
	return res, err
}

type icExecer struct {
	x Execer
	f Interceptor
}

func (w icExecer) Exec(ctx context.Context, id string, argv []string) (res ExecResult, err error) {
	err = w.f(ctx, OpExec, func(ctx context.Context) (err error) { res, err = w.x.Exec(ctx, id, argv); return })
	return res, err
}

type icAttacher struct {
	x Attacher
	f Interceptor
}

// Attach runs only the start through f: the stream's reads and writes are not operations.
func (w icAttacher) Attach(ctx context.Context, id string, argv []string) (st Stream, err error) {
	err = w.f(ctx, OpAttach, func(ctx context.Context) (err error) { st, err = w.x.Attach(ctx, id, argv); return })
	return st, err
}

type icFiles struct {
	x Files
	f Interceptor
}

func (w icFiles) WriteFile(ctx context.Context, id, path string, data []byte) error {
	return w.f(ctx, OpWriteFile, func(ctx context.Context) error { return w.x.WriteFile(ctx, id, path, data) })
}

func (w icFiles) ReadFile(ctx context.Context, id, path string) (data []byte, err error) {
	err = w.f(ctx, OpReadFile, func(ctx context.Context) (err error) { data, err = w.x.ReadFile(ctx, id, path); return })
	return data, err
}

type icImages struct {
	x ImageChecker
	f Interceptor
}

func (w icImages) EnsureImage(ctx context.Context, image string) error {
	return w.f(ctx, OpEnsureImage, func(ctx context.Context) error { return w.x.EnsureImage(ctx, image) })
}

type icLogs struct {
	x LogReader
	f Interceptor
}

func (w icLogs) Logs(ctx context.Context, id string, tail int) (out string, err error) {
	err = w.f(ctx, OpLogs, func(ctx context.Context) (err error) { out, err = w.x.Logs(ctx, id, tail); return })
	return out, err
}

type icImager struct {
	x Imager
	f Interceptor
}

func (w icImager) CreateImage(ctx context.Context, spec ImageSpec) (sb Sandbox, err error) {
	err = w.f(ctx, OpCreateImage, func(ctx context.Context) (err error) { sb, err = w.x.CreateImage(ctx, spec); return })
	return sb, err
}

type icVolumer struct {
	x Volumer
	f Interceptor
}

func (w icVolumer) CreateVolume(ctx context.Context, spec VolumeSpec) (sb Sandbox, err error) {
	err = w.f(ctx, OpCreateVolume, func(ctx context.Context) (err error) { sb, err = w.x.CreateVolume(ctx, spec); return })
	return sb, err
}

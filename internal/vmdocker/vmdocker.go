// Package vmdocker drives the Docker engine inside a remote VM the one way agentenv's VM-mode
// cloud providers (modal_vm, e2b) can: as /bin/sh scripts run by the provider's own exec
// (Modal's sandbox exec, E2B's envd process API), whose output it reads back. It writes the
// scripts that start a stack's container, remove one, run a command in one and list the ports
// a stack publishes, and parses what they print; Upload aside, it does no I/O. The label that
// remembers where a VM's ports are published (FormatSlots) is docker_vm's too.
//
// A provider that reaches its VMs only through its cloud's API gives a Shell (a root shell and a
// file upload) and gets the rest over it: Start, Remove, and, as a Host, RunIn (a container
// started and its ports published), ExecIn (a command with its stdin as a file) and AwaitEngine
// (the wait for a VM's engine).
//
// Every container it starts joins the stack's network (Network, or the spec's own Network) under its name and aliases,
// runs with every capability dropped but the spec's CapAdd, with no-new-privileges, and with the
// spec's memory and CPU limits. An image the VM's engine does not have is never pulled by the
// script: it exits with ExitNoImage, and the provider supplies it with Upload from this host's
// engine. Only a pinned image (SandboxSpec.Pinned) is pulled, by Start, before the script.
package vmdocker

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/shellquote"
)

// Network is the Docker network inside a VM that a stack's containers share, so that they reach
// each other by name.
const Network = "agentenv"

// Exit codes of RunScript beside docker's own.
const (
	ExitNameInUse = 96 // a container of that name exists in the VM
	ExitNoImage   = 97 // the image is not in the VM's engine
)

// Run is one container of a stack to start.
type Run struct {
	Spec   agentenv.SandboxSpec // Name, Image, Command, Env, WorkDir, Aliases, CapAdd, Memory, CPUs, Pids, Ports
	Labels map[string]string    // the container's labels
	// Slots maps each of Spec.Ports to the VM port it is published on. Nil: the VM's engine
	// picks a VM port for each, and the script prints it (see Started).
	Slots map[int]int
	// Files is where the script reads a tar of files to copy into the container before it
	// starts: "" for none, "-" for the script's stdin, else a path in the VM.
	Files string
}

// RunScript returns the script that starts r's container: it exits ExitNoImage if the image is
// missing and ExitNameInUse if the name is taken (creating nothing), makes the stack's network
// unless it exists, creates the container, copies the files in, starts it, and prints a line
// "port PORT ADDR" for each port (ADDR as `docker port` gives it) and "state RUNNING EXITCODE"
// last. Any other failure exits with docker's code, its message on stderr.
func RunScript(r Run) string {
	s := r.Spec
	net := Network
	if s.Network != "" {
		net = s.Network
	}
	args := []string{"docker", "create", "--name", s.Name, "--network", net}
	for _, a := range s.Aliases {
		args = append(args, "--network-alias", a)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
		args = append(args, "--label", k+"="+r.Labels[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		args = append(args, "-e", k+"="+s.Env[k])
	}
	for _, port := range s.Ports {
		if slot, ok := r.Slots[port]; ok {
			args = append(args, "-p", fmt.Sprintf("%d:%d", slot, port))
		} else {
			args = append(args, "-p", strconv.Itoa(port))
		}
	}
	if s.WorkDir != "" {
		args = append(args, "-w", s.WorkDir)
	}
	args = append(args, "--cap-drop", "ALL")
	for _, c := range s.CapAdd {
		args = append(args, "--cap-add", c)
	}
	args = append(args, "--security-opt", "no-new-privileges")
	if s.Memory > 0 {
		// --memory-swap equal to --memory: the limit holds swap included.
		m := strconv.FormatInt(s.Memory, 10)
		args = append(args, "--memory", m, "--memory-swap", m)
	}
	if s.CPUs > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(s.CPUs, 'f', -1, 64))
	}
	pids := s.Pids
	if pids <= 0 {
		pids = agentenv.DefaultPidsLimit
	}
	args = append(args, "--pids-limit", strconv.FormatInt(pids, 10))
	args = append(args, s.Image)
	args = append(args, s.Command...)

	name := quote(s.Name)
	var b strings.Builder
	b.WriteString("docker image inspect " + quote(s.Image) + " >/dev/null 2>&1 || exit " + strconv.Itoa(ExitNoImage) + "\n")
	b.WriteString("docker container inspect " + name + " >/dev/null 2>&1 && exit " + strconv.Itoa(ExitNameInUse) + "\n")
	b.WriteString(ensureNetwork(net) + "\n")
	b.WriteString(shellquote.Join(args) + " >/dev/null || exit $?\n")
	switch r.Files {
	case "":
	case "-":
		b.WriteString("docker cp - " + quote(s.Name+":/") + " || exit $?\n")
	default:
		b.WriteString("docker cp - " + quote(s.Name+":/") + " <" + path(r.Files) + " || exit $?\n")
	}
	b.WriteString("docker start " + name + " >/dev/null || exit $?\n")
	for _, port := range s.Ports {
		fmt.Fprintf(&b, "echo \"port %d $(docker port %s %d/tcp | head -n 1)\"\n", port, name, port)
	}
	b.WriteString("echo state $(docker inspect -f '{{.State.Running}} {{.State.ExitCode}}' " + name + ")")
	return b.String()
}

// ensureNetwork makes the stack's network net unless it exists. Components start side by
// side, and an engine before 25.0 lets two concurrent creates of one name both succeed, after
// which every use of the name is "ambiguous": the check and the create hold a flock(1) on a
// file of the VM's /tmp (where the VM has no flock, the create goes unlocked, as before).
func ensureNetwork(net string) string {
	n := quote(net)
	return "docker network inspect " + n + " >/dev/null 2>&1 || {\n" +
		"exec 9>/tmp/.agentenv-network.lock; flock 9 2>/dev/null\n" +
		"docker network inspect " + n + " >/dev/null 2>&1 || docker network create " + n + " >/dev/null 2>&1 ||\n" +
		"\tdocker network inspect " + n + " >/dev/null || exit $?\n" +
		"flock -u 9 2>/dev/null; exec 9>&-\n}"
}

// Started is what RunScript printed of the container it started.
type Started struct {
	Running  bool
	ExitCode int         // when not Running
	Ports    map[int]int // the VM port of each port
	// ImageNote says, for a pinned image, how it came to run (Start's, not the script's).
	ImageNote string
}

// ParseRun reads RunScript's output for r: the container's state, and the VM port of each of
// r.Spec.Ports (r.Slots' where set). A port that is not published is an error.
func ParseRun(out string, r Run) (Started, error) {
	st := Started{Running: true, Ports: map[int]int{}}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "port":
			port, err1 := strconv.Atoi(f[1])
			vmPort, err2 := strconv.Atoi(f[2][strings.LastIndex(f[2], ":")+1:])
			if err1 == nil && err2 == nil && vmPort > 0 {
				st.Ports[port] = vmPort
			}
		case len(f) == 3 && f[0] == "state":
			st.Running = f[1] != "false"
			if !st.Running {
				st.ExitCode, _ = strconv.Atoi(f[2])
			}
		}
	}
	for _, port := range r.Spec.Ports {
		if slot, ok := r.Slots[port]; ok && st.Ports[port] == 0 {
			st.Ports[port] = slot
		}
		if st.Ports[port] == 0 {
			return Started{}, fmt.Errorf("port %d: not published in the vm (the script said %q)", port, strings.TrimSpace(out))
		}
	}
	return st, nil
}

// RunError turns RunScript's exit code into an error of the right kind, nil for 0. hint says,
// for a missing image, how the provider gets images into its VMs.
func RunError(r Run, code int, stderr []byte, hint string) error {
	switch code {
	case 0:
		return nil
	case ExitNoImage:
		return MissingImage(r.Spec.Image, hint)
	case ExitNameInUse:
		return fmt.Errorf("container name %s in use in the vm: %w", r.Spec.Name, agentenv.ErrConflict)
	}
	return fmt.Errorf("docker create/start exited %d: %s", code, strings.TrimSpace(string(stderr)))
}

// MissingImage is the error of an image the VM's engine lacks and the provider cannot supply:
// ErrInvalid naming it, with hint (what the user can do).
func MissingImage(image, hint string) error {
	return fmt.Errorf("image %s is not in the vm: %s: %w", image, hint, agentenv.ErrInvalid)
}

// ImageIDScript prints the id of image in the VM's engine, or nothing if it has none.
func ImageIDScript(image string) string {
	return "docker image inspect -f '{{.Id}}' " + quote(image) + " 2>/dev/null; exit 0"
}

// LoadScript loads a `docker save` archive into the VM's engine: from stdin when file is "",
// else from file, which it then removes.
func LoadScript(file string) string {
	if file == "" {
		return "docker load -q"
	}
	return "docker load -q -i " + quote(file) + "; code=$?; rm -f " + quote(file) + "; exit $code"
}

// RemoveScript force-removes container name, then each network of its own it was on (a
// deployment's, SandboxSpec.Network) that no other container uses any more; its exit code and
// stderr are docker rm's.
func RemoveScript(name string) string {
	n := quote(name)
	return "nets=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' " + n + " 2>/dev/null)\n" +
		shellquote.Join([]string{"docker", "rm", "-f", name}) + "; code=$?\n" +
		"for net in $nets; do [ \"$net\" = " + quote(Network) + " ] || docker network rm \"$net\" >/dev/null 2>&1; done\n" +
		"exit $code"
}

// Removed says whether RemoveScript's exit code and stderr mean the container is gone (removed
// now, or absent already): nil, or the error.
func Removed(code int, stderr []byte) error {
	if code == 0 || NoSuchContainer(stderr) {
		return nil
	}
	return fmt.Errorf("docker rm exited %d: %s", code, strings.TrimSpace(string(stderr)))
}

// NoSuchContainer reports whether a docker command's stderr says the container does not exist.
func NoSuchContainer(stderr []byte) bool {
	return strings.Contains(string(stderr), "No such container")
}

// UsedPortsScript prints the VM ports that the stack's containers publish, separated by
// spaces.
const UsedPortsScript = `for c in $(docker ps -aq); do docker inspect -f '{{range $p, $b := .HostConfig.PortBindings}}{{range $b}}{{.HostPort}} {{end}}{{end}}' "$c" 2>/dev/null; done; exit 0`

// ParseUsedPorts reads UsedPortsScript's output.
func ParseUsedPorts(out string) map[int]bool {
	used := map[int]bool{}
	for _, f := range strings.Fields(out) {
		if n, err := strconv.Atoi(f); err == nil {
			used[n] = true
		}
	}
	return used
}

// ExecScript runs argv in container name with env, reading stdin from stdinFile in the VM, or
// from nothing when stdinFile is "".
func ExecScript(name string, argv []string, env map[string]string, stdinFile string) string {
	args := []string{"docker", "exec"}
	if stdinFile != "" {
		args = append(args, "-i")
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		args = append(args, "-e", k+"="+env[k])
	}
	args = append(append(args, name), argv...)
	if stdinFile == "" {
		return shellquote.Join(args) + " </dev/null"
	}
	return shellquote.Join(args) + " <" + quote(stdinFile)
}

// StateScript prints "STATUS EXITCODE" of container name (docker's .State.Status: created,
// running, exited, ...).
func StateScript(name string) string {
	return "docker inspect -f '{{.State.Status}} {{.State.ExitCode}}' " + quote(name)
}

// FormatSlots writes a PORT:SLOT map as "PORT:SLOT,..." in port order, for a label or tag that
// remembers where a VM's ports are published.
func FormatSlots(slots map[int]int) string {
	fs := make([]string, 0, len(slots))
	for _, port := range slices.Sorted(maps.Keys(slots)) {
		fs = append(fs, fmt.Sprintf("%d:%d", port, slots[port]))
	}
	return strings.Join(fs, ",")
}

// ParseSlots reads FormatSlots' output; malformed entries are skipped.
func ParseSlots(s string) map[int]int {
	out := map[int]int{}
	for f := range strings.SplitSeq(s, ",") {
		a, b, ok := strings.Cut(f, ":")
		port, err1 := strconv.Atoi(a)
		slot, err2 := strconv.Atoi(b)
		if ok && err1 == nil && err2 == nil {
			out[port] = slot
		}
	}
	return out
}

func quote(s string) string { return shellquote.Join([]string{s}) }

// plainPath is a path the shell reads as it is.
var plainPath = regexp.MustCompile(`^[A-Za-z0-9/._-]+$`)

// path writes a file path for the shell: as it is when it is plain, else quoted.
func path(p string) string {
	if plainPath.MatchString(p) {
		return p
	}
	return quote(p)
}

// PickSlots chooses a slot for each of ports from pool, the VM ports published for a stack, in
// pool's order, skipping those taken (ParseUsedPorts'). A pool with too few free slots is
// agentenv.ErrUnavailable.
func PickSlots(pool []int, taken map[int]bool, ports []int) (map[int]int, error) {
	taken = maps.Clone(taken)
	if taken == nil {
		taken = map[int]bool{}
	}
	out := map[int]int{}
	for _, port := range ports {
		i := slices.IndexFunc(pool, func(s int) bool { return !taken[s] })
		if i < 0 {
			return nil, fmt.Errorf("no free slot for port %d (a vm has %d): %w", port, len(pool), agentenv.ErrUnavailable)
		}
		out[port] = pool[i]
		taken[pool[i]] = true
	}
	return out, nil
}

//go:build integration

package docker_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/images"
	"github.com/agentenv/agentenv/provider/docker"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/providertest"
)

// testLabel marks everything one test makes, so CheckNoLeftovers can find it on an engine that
// other tests share.
const testLabel = "agentenv.test"

// setup returns a provider, the engine client, the test image and labels that CheckNoLeftovers
// watches for the rest of the test.
func setup(t *testing.T) (*docker.Provider, *client.Client, string, map[string]string) {
	t.Helper()
	cli := dockertest.Require(t)
	image := dockertest.TestImage(t)
	labels := map[string]string{testLabel: providertest.NewID()}
	dockertest.CheckNoLeftovers(t, cli, labels)
	p, err := docker.New(docker.Config{}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p, cli, image, labels
}

// spec returns a spec for a fresh record running argv on the test image.
func spec(image string, labels map[string]string, argv ...string) agentenv.SandboxSpec {
	id := providertest.NewID()
	l := map[string]string{agentenv.LabelRecord: id}
	for k, v := range labels {
		l[k] = v
	}
	return agentenv.SandboxSpec{Name: id, Image: image, Command: argv, Labels: l}
}

func TestConformance(t *testing.T) {
	cli := dockertest.Require(t)
	image := dockertest.TestImage(t)
	labels := map[string]string{testLabel: providertest.NewID()}
	dockertest.CheckNoLeftovers(t, cli, labels)
	providertest.Run(t, func(t *testing.T) agentenv.Provider {
		p, err := docker.New(docker.Config{}, nil)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}, providertest.Options{
		Image:       image,
		Command:     []string{"serve", ":8080"},
		Port:        8080,
		ExitCommand: []string{"exit", "3"},
		ExecCommand: []string{"/agentenv", "exit", "3"},
		ExitCode:    3,
		Labels:      labels,
	})
}

func TestTerminate_RemovedBehindOurBack(t *testing.T) {
	p, cli, image, labels := setup(t)
	ctx := t.Context()
	s := spec(image, labels, "sleep")
	if _, err := p.Create(ctx, s); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := cli.ContainerRemove(ctx, s.Name, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatalf("docker rm -f %s: %v", s.Name, err)
	}
	if err := p.Terminate(ctx, s.Name); err != nil {
		t.Errorf("Terminate(%s) of a container removed behind our back = %v, want nil", s.Name, err)
	}
	if _, err := p.Get(ctx, s.Name); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get(%s) = %v, want ErrNotFound", s.Name, err)
	}
}

func TestGet_Killed(t *testing.T) {
	p, cli, image, labels := setup(t)
	ctx := t.Context()
	s := spec(image, labels, "sleep")
	t.Cleanup(func() { p.Terminate(context.Background(), s.Name) })
	if _, err := p.Create(ctx, s); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := cli.ContainerKill(ctx, s.Name, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatalf("docker kill %s: %v", s.Name, err)
	}
	wait := cli.ContainerWait(ctx, s.Name, client.ContainerWaitOptions{})
	select {
	case <-wait.Result:
	case err := <-wait.Error:
		t.Fatalf("wait: %v", err)
	}
	sb, err := p.Get(ctx, s.Name)
	if !errors.Is(err, agentenv.ErrGone) {
		t.Fatalf("Get(%s) of a killed container = %v, want ErrGone", s.Name, err)
	}
	if sb.ExitCode != 137 || sb.State != agentenv.SandboxExited {
		t.Errorf("Get(%s) = state %q exit %d, want exited 137", s.Name, sb.State, sb.ExitCode)
	}
	if err := p.Terminate(ctx, s.Name); err != nil {
		t.Errorf("Terminate(%s) of a killed container = %v, want nil", s.Name, err)
	}
}

func TestCreate_EngineUnreachable(t *testing.T) {
	const host = "unix:///nonexistent.sock"
	p, err := docker.New(docker.Config{Host: host}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s := spec("agentenv-testserver:any", nil, "sleep")
	for name, err := range map[string]error{
		"Create":    func() error { _, err := p.Create(t.Context(), s); return err }(),
		"Terminate": p.Terminate(t.Context(), s.Name),
		"List":      func() error { _, err := p.List(t.Context(), nil); return err }(),
	} {
		if !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), host) {
			t.Errorf("%s with no engine = %v, want ErrUnavailable naming %s", name, err, host)
		}
		t.Logf("%s with no engine: %v", name, err)
	}
}

func TestCreate_MissingImage(t *testing.T) {
	p, _, _, labels := setup(t)
	image := "agentenv-missing-" + providertest.NewID() + ":none"
	s := spec(image, labels, "sleep")
	_, err := p.Create(t.Context(), s)
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), image) {
		t.Errorf("Create with image %s = %v, want ErrInvalid naming the image", image, err)
	}
	t.Logf("Create with a missing image: %v", err)
	if sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: s.Name}); err != nil || len(sbs) != 0 {
		t.Errorf("List after a refused Create = %v, %v; want none", sbs, err)
	}
}

func TestCreate_MissingNetwork(t *testing.T) {
	p, _, image, labels := setup(t)
	s := spec(image, labels, "sleep")
	s.Network = providertest.NewID()
	if _, err := p.Create(t.Context(), s); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), s.Network) {
		t.Errorf("Create on a missing network = %v, want ErrInvalid naming it", err)
	}
}

func TestCreate_NameTaken(t *testing.T) {
	p, _, image, labels := setup(t)
	s := spec(image, labels, "sleep")
	t.Cleanup(func() { p.Terminate(context.Background(), s.Name) })
	if _, err := p.Create(t.Context(), s); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := p.Create(t.Context(), s); !errors.Is(err, agentenv.ErrConflict) {
		t.Errorf("second Create(%s) = %v, want ErrConflict", s.Name, err)
	}
	if _, err := p.Get(t.Context(), s.Name); err != nil {
		t.Errorf("Get(%s) after a refused second Create = %v; the first must be left alone", s.Name, err)
	}
}

func TestCreate_Hardening(t *testing.T) {
	p, cli, image, labels := setup(t)
	s := spec(image, labels, "sleep")
	s.CapAdd, s.Memory, s.CPUs, s.Pids = []string{"NET_BIND_SERVICE"}, 64<<20, 0.5, 32
	t.Cleanup(func() { p.Terminate(context.Background(), s.Name) })
	if _, err := p.Create(t.Context(), s); err != nil {
		t.Fatalf("Create: %v", err)
	}
	res, err := cli.ContainerInspect(t.Context(), s.Name, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	hc := res.Container.HostConfig
	if hc.PidsLimit == nil || *hc.PidsLimit != 32 {
		t.Errorf("PidsLimit = %v, want 32", hc.PidsLimit)
	}
	if hc.Init == nil || !*hc.Init || hc.Memory != 64<<20 || hc.NanoCPUs != 5e8 ||
		strings.Join(hc.CapDrop, ",") != "ALL" || strings.TrimPrefix(strings.Join(hc.CapAdd, ","), "CAP_") != "NET_BIND_SERVICE" ||
		strings.Join(hc.SecurityOpt, ",") != "no-new-privileges" {
		t.Errorf("HostConfig = init %v mem %d cpus %d drop %v add %v secopt %v; want init, 64MiB, 0.5, ALL, NET_BIND_SERVICE, no-new-privileges",
			hc.Init, hc.Memory, hc.NanoCPUs, hc.CapDrop, hc.CapAdd, hc.SecurityOpt)
	}
	if got := res.Container.Config.StopTimeout; got == nil || *got != 1 {
		t.Errorf("StopTimeout = %v, want 1", got)
	}
}

// TestCreate_MemoryLimitKills: a process that allocates past the container's memory limit is
// OOM-killed (exit 137), swap included, while one that stays below it runs; and the image's
// processes run as a non-root user.
func TestCreate_MemoryLimitKills(t *testing.T) {
	p, cli, image, labels := setup(t)
	ctx := t.Context()
	s := spec(image, labels, "sleep")
	s.Memory = 48 << 20
	t.Cleanup(func() { p.Terminate(context.Background(), s.Name) })
	if _, err := p.Create(ctx, s); err != nil {
		t.Fatalf("Create: %v", err)
	}
	res, err := cli.ContainerInspect(ctx, s.Name, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if hc := res.Container.HostConfig; hc.Memory != 48<<20 || hc.MemorySwap != 48<<20 {
		t.Errorf("HostConfig memory %d swap %d, want both 48MiB", hc.Memory, hc.MemorySwap)
	}
	if u := res.Container.Config.User; u != images.User {
		t.Errorf("Config.User = %q, want %q", u, images.User)
	}
	out, err := p.Exec(ctx, s.Name, []string{"/agentenv", "id"})
	if err != nil || out.ExitCode != 0 || strings.HasPrefix(string(out.Stdout), "0:") || strings.TrimSpace(string(out.Stdout)) != images.User {
		t.Errorf("Exec id = %q (exit %d), %v; want %s, not root", out.Stdout, out.ExitCode, err, images.User)
	}
	if out, err := p.Exec(ctx, s.Name, []string{"/agentenv", "alloc", "8"}); err != nil || out.ExitCode != 0 {
		t.Errorf("Exec alloc 8 = exit %d (stderr %q), %v; want it to fit", out.ExitCode, out.Stderr, err)
	}
	out, err = p.Exec(ctx, s.Name, []string{"/agentenv", "alloc", "256"})
	if err != nil || out.ExitCode != 137 || strings.Contains(string(out.Stdout), "allocated") {
		t.Errorf("Exec alloc 256 in 48MiB = exit %d stdout %q, %v; want OOM-killed (137)", out.ExitCode, out.Stdout, err)
	}
}

func TestExecAndFiles(t *testing.T) {
	p, cli, image, labels := setup(t)
	ctx := t.Context()
	s := spec(image, labels, "sleep")
	t.Cleanup(func() { p.Terminate(context.Background(), s.Name) })
	if _, err := p.Create(ctx, s); err != nil {
		t.Fatalf("Create: %v", err)
	}
	res, err := p.Exec(ctx, s.Name, []string{"/agentenv", "echo", "hello", "world"})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello world\n" {
		t.Errorf("Exec echo = %+v, %v; want exit 0 and %q", res, err, "hello world\n")
	}
	res, err = p.Exec(ctx, s.Name, []string{"/agentenv", "cat", "/missing"})
	if err != nil || res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "no such file") {
		t.Errorf("Exec cat /missing = %+v (stderr %q), %v; want exit 1 and an error on stderr", res, res.Stderr, err)
	}

	if err := p.WriteFile(ctx, s.Name, "/tmp/a/b/c.txt", []byte("data")); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if got, err := p.ReadFile(ctx, s.Name, "/tmp/a/b/c.txt"); err != nil || string(got) != "data" {
		t.Errorf("ReadFile = %q, %v; want %q", got, err, "data")
	}
	res, err = p.Exec(ctx, s.Name, []string{"/agentenv", "write", "/tmp/w.txt", "from exec"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec write = %+v, %v", res, err)
	}
	if got, err := p.ReadFile(ctx, s.Name, "/tmp/w.txt"); err != nil || string(got) != "from exec" {
		t.Errorf("ReadFile of a file written by exec = %q, %v", got, err)
	}
	if _, err := p.ReadFile(ctx, s.Name, "/tmp/missing"); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("ReadFile(/tmp/missing) = %v, want ErrNotFound", err)
	}
	// /tmp must keep its mode 1777 after writes below it.
	if err := p.WriteFile(ctx, s.Name, "/tmp/x", []byte("x")); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	st, err := cli.ContainerStatPath(ctx, s.Name, client.ContainerStatPathOptions{Path: "/tmp"})
	if err != nil || st.Stat.Mode.Perm() != 0o777 || st.Stat.Mode&os.ModeSticky == 0 {
		t.Errorf("stat /tmp after WriteFile = %v, %v; want drwxrwxrwt", st.Stat.Mode, err)
	}
	if _, err := p.Exec(ctx, providertest.NewID(), []string{"/agentenv", "echo"}); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Exec in an unknown sandbox = %v, want ErrNotFound", err)
	}
}

func TestLogs(t *testing.T) {
	p, _, image, labels := setup(t)
	ctx := t.Context()
	s := spec(image, labels, "exit", "7")
	t.Cleanup(func() { p.Terminate(context.Background(), s.Name) })
	if _, err := p.Create(ctx, s); err != nil {
		t.Fatalf("Create: %v", err)
	}
	s2 := spec(image, labels, "bogus")
	t.Cleanup(func() { p.Terminate(context.Background(), s2.Name) })
	if _, err := p.Create(ctx, s2); err != nil {
		t.Fatalf("Create: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var logs string
	for time.Now().Before(deadline) {
		var err error
		if logs, err = p.Logs(ctx, s2.Name, 10); err != nil {
			t.Fatalf("Logs: %v", err)
		}
		if strings.Contains(logs, "usage") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("Logs(%s) = %q, want the usage message", s2.Name, logs)
}

// newNetwork creates a network of a fresh record carrying labels, removed at the test's end,
// and returns its record id and labels.
func newNetwork(t *testing.T, p *docker.Provider, labels map[string]string) (string, map[string]string) {
	t.Helper()
	netID := providertest.NewID()
	nl := map[string]string{agentenv.LabelRecord: netID}
	for k, v := range labels {
		nl[k] = v
	}
	t.Cleanup(func() { p.Terminate(context.Background(), netID) })
	if _, err := p.CreateNetwork(t.Context(), agentenv.NetworkSpec{Name: netID, Labels: nl}); err != nil {
		t.Fatalf("CreateNetwork: %v", err)
	}
	return netID, nl
}

func TestNetwork_AliasReachable(t *testing.T) {
	p, _, image, labels := setup(t)
	ctx := t.Context()
	netID, nl := newNetwork(t, p, labels)
	if _, err := p.CreateNetwork(ctx, agentenv.NetworkSpec{Name: netID, Labels: nl}); !errors.Is(err, agentenv.ErrConflict) {
		t.Errorf("second CreateNetwork(%s) = %v, want ErrConflict", netID, err)
	}
	server := spec(image, labels, "serve", ":8080")
	server.Network, server.Aliases = netID, []string{"web"}
	t.Cleanup(func() { p.Terminate(context.Background(), server.Name) })
	client := spec(image, labels, "sleep")
	client.Network = netID
	t.Cleanup(func() { p.Terminate(context.Background(), client.Name) })
	for _, s := range []agentenv.SandboxSpec{server, client} {
		if _, err := p.Create(ctx, s); err != nil {
			t.Fatalf("Create(%s): %v", s.Name, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := p.Exec(ctx, client.Name, []string{"/agentenv", "get", "http://web:8080/"})
		if err == nil && res.ExitCode == 0 && string(res.Stdout) == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET http://web:8080/ from a peer = %+v (stderr %q), %v", res, res.Stderr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTerminate_NetworkWithAContainerAttached: a network whose removal the engine refuses
// because a container of another record is still attached is removed all the same (the
// container is disconnected after the engine had a moment to release it itself), and that
// container runs on.
func TestTerminate_NetworkWithAContainerAttached(t *testing.T) {
	p, _, image, labels := setup(t)
	ctx := t.Context()
	netID, _ := newNetwork(t, p, labels)
	peer := spec(image, labels, "sleep")
	peer.Network = netID
	t.Cleanup(func() { p.Terminate(context.Background(), peer.Name) })
	if _, err := p.Create(ctx, peer); err != nil {
		t.Fatalf("Create(%s): %v", peer.Name, err)
	}
	if err := p.Terminate(ctx, netID); err != nil {
		t.Fatalf("Terminate(network %s) with a container attached = %v", netID, err)
	}
	if _, err := p.Get(ctx, netID); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get(network %s) after its Terminate = %v, want ErrNotFound", netID, err)
	}
	if sb, err := p.Get(ctx, peer.Name); err != nil || sb.State != agentenv.SandboxRunning {
		t.Errorf("the attached container after the network's Terminate = %+v, %v; want it running", sb, err)
	}
}

// TestTerminate_NetworkWithALateContainerOfItsDeployment: a container of the network's own
// deployment still attached when the network goes (its create finished after its record's
// teardown listed it) is removed with the network, through the engine's own path.
func TestTerminate_NetworkWithALateContainerOfItsDeployment(t *testing.T) {
	p, _, image, labels := setup(t)
	ctx := t.Context()
	mine := maps.Clone(labels)
	mine[agentenv.LabelDeployment] = providertest.NewID()
	netID, _ := newNetwork(t, p, mine)
	late := spec(image, mine, "sleep")
	late.Network = netID
	t.Cleanup(func() { p.Terminate(context.Background(), late.Name) })
	if _, err := p.Create(ctx, late); err != nil {
		t.Fatalf("Create(%s): %v", late.Name, err)
	}
	if err := p.Terminate(ctx, netID); err != nil {
		t.Fatalf("Terminate(network %s) with its deployment's container attached = %v", netID, err)
	}
	for _, id := range []string{netID, late.Name} {
		if _, err := p.Get(ctx, id); !errors.Is(err, agentenv.ErrNotFound) {
			t.Errorf("Get(%s) after the network's Terminate = %v, want ErrNotFound", id, err)
		}
	}
}

// BenchmarkCreateTerminate measures Create then Terminate of one container serving a port.
// Compare with BenchmarkDockerCLI, the same through `docker run -d` and `docker rm -f`.
func BenchmarkCreateTerminate(b *testing.B) {
	cli := dockertest.Require(b)
	image := dockertest.TestImage(b)
	labels := map[string]string{testLabel: providertest.NewID()}
	dockertest.CheckNoLeftovers(b, cli, labels)
	p, err := docker.New(docker.Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var terminate time.Duration
	for b.Loop() {
		s := spec(image, labels, "serve", ":8080")
		s.Ports = []int{8080}
		if _, err := p.Create(ctx, s); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := p.Terminate(ctx, s.Name); err != nil {
			b.Fatal(err)
		}
		terminate += time.Since(start)
	}
	b.ReportMetric(float64(terminate.Milliseconds())/float64(b.N), "terminate-ms/op")
}

// BenchmarkDockerCLI is the baseline for BenchmarkCreateTerminate.
func BenchmarkDockerCLI(b *testing.B) {
	cli := dockertest.Require(b)
	image := dockertest.TestImage(b)
	labels := map[string]string{testLabel: providertest.NewID()}
	dockertest.CheckNoLeftovers(b, cli, labels)
	var terminate time.Duration
	for b.Loop() {
		name := providertest.NewID()
		run := exec.Command("docker", "run", "-d", "--name", name, "--init", "-p", "127.0.0.1::8080",
			"--label", agentenv.LabelRecord+"="+name, "--label", testLabel+"="+labels[testLabel],
			image, "serve", ":8080")
		if out, err := run.CombinedOutput(); err != nil {
			b.Fatalf("docker run: %v: %s", err, out)
		}
		start := time.Now()
		if out, err := exec.Command("docker", "rm", "-f", name).CombinedOutput(); err != nil {
			b.Fatalf("docker rm -f: %v: %s", err, out)
		}
		terminate += time.Since(start)
	}
	b.ReportMetric(float64(terminate.Milliseconds())/float64(b.N), "terminate-ms/op")
}

// TestAttach: a process attached in a container echoes its standard input back on its output,
// ends its output once its input is closed, and Close ends the stream of one still reading.
func TestAttach(t *testing.T) {
	p, _, image, labels := setup(t)
	ctx := t.Context()
	s := spec(image, labels, "sleep")
	t.Cleanup(func() { p.Terminate(context.Background(), s.Name) })
	if _, err := p.Create(ctx, s); err != nil {
		t.Fatalf("Create: %v", err)
	}
	st, err := p.Attach(ctx, s.Name, []string{"/agentenv", "cat", "/dev/stdin"})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if _, err := st.Write([]byte("hello over stdin\n")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := st.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	out, err := io.ReadAll(st)
	if err != nil || string(out) != "hello over stdin\n" {
		t.Errorf("output = %q, %v; want the input echoed", out, err)
	}
	select {
	case <-st.Done():
	case <-time.After(10 * time.Second):
		t.Error("Done not closed after the output ended")
	}
	if err := st.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}

	// A process still reading: Close ends the stream within its grace.
	st, err = p.Attach(ctx, s.Name, []string{"/agentenv", "cat", "/dev/stdin"})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	start := time.Now()
	if err := st.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-st.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after Close")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}

	if _, err := p.Attach(ctx, s.Name, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Attach with no command = %v, want ErrInvalid", err)
	}
	if _, err := p.Attach(ctx, "agentenv-no-such-record", []string{"/agentenv", "sleep"}); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Attach to a missing sandbox = %v, want ErrNotFound", err)
	}
}

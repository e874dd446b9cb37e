package docker

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/agentenv/agentenv"
)

func validSpec() agentenv.SandboxSpec {
	return agentenv.SandboxSpec{
		Name:    "r-1",
		Image:   "img:1",
		Command: []string{"serve", ":8080"},
		Env:     map[string]string{"B": "2", "A": "1"},
		Labels:  map[string]string{agentenv.LabelRecord: "r-1", agentenv.LabelRun: "run-1"},
		Ports:   []int{8080, 9090},
		CapAdd:  []string{"NET_ADMIN"},
		Expires: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func TestContainerOptions(t *testing.T) {
	cfg := Config{StopGrace: 1500 * time.Millisecond, DefaultMemory: 1 << 30, DefaultCPUs: 2}
	opts, err := containerOptions(cfg, validSpec().Name, validSpec())
	if err != nil {
		t.Fatalf("containerOptions: %v", err)
	}
	c, hc := opts.Config, opts.HostConfig
	if opts.Name != "r-1" || c.Image != "img:1" || !cmp.Equal(c.Cmd, []string{"serve", ":8080"}) {
		t.Errorf("name, image, cmd = %q, %q, %v", opts.Name, c.Image, c.Cmd)
	}
	if diff := cmp.Diff([]string{"A=1", "B=2"}, c.Env); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}
	wantLabels := map[string]string{agentenv.LabelRecord: "r-1", agentenv.LabelRun: "run-1", agentenv.LabelExpires: "2030-01-02T03:04:05Z"}
	if diff := cmp.Diff(wantLabels, c.Labels); diff != "" {
		t.Errorf("Labels (-want +got):\n%s", diff)
	}
	if c.StopTimeout == nil || *c.StopTimeout != 2 {
		t.Errorf("StopTimeout = %v, want 2 (1.5s rounded up)", c.StopTimeout)
	}
	if hc.Init == nil || !*hc.Init || !cmp.Equal(hc.CapDrop, []string{"ALL"}) || !cmp.Equal(hc.CapAdd, []string{"NET_ADMIN"}) ||
		!cmp.Equal(hc.SecurityOpt, []string{"no-new-privileges"}) {
		t.Errorf("hardening = init %v drop %v add %v secopt %v", hc.Init, hc.CapDrop, hc.CapAdd, hc.SecurityOpt)
	}
	if hc.Memory != 1<<30 || hc.MemorySwap != 1<<30 || hc.NanoCPUs != 2e9 || hc.PidsLimit == nil || *hc.PidsLimit != agentenv.DefaultPidsLimit {
		t.Errorf("limits = %d bytes, %d nanocpus, pids %v; want the defaults", hc.Memory, hc.NanoCPUs, hc.PidsLimit)
	}
	limited := validSpec()
	limited.Pids = 64
	if o, err := containerOptions(cfg, limited.Name, limited); err != nil || *o.HostConfig.PidsLimit != 64 {
		t.Errorf("a spec's pids limit = %v, %v; want 64", o.HostConfig.PidsLimit, err)
	}
	for _, n := range []uint16{8080, 9090} {
		port, _ := network.PortFrom(n, network.TCP)
		if _, ok := c.ExposedPorts[port]; !ok {
			t.Errorf("port %d not exposed", n)
		}
		want := []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1")}}
		if diff := cmp.Diff(want, hc.PortBindings[port], cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("binding of %d (-want +got):\n%s", n, diff)
		}
	}
	if opts.NetworkingConfig != nil || hc.NetworkMode != "" {
		t.Errorf("network = %v %q, want the default", opts.NetworkingConfig, hc.NetworkMode)
	}

	spec := validSpec()
	spec.Network, spec.Aliases, spec.Memory, spec.CPUs = "net-1", []string{"db"}, 1<<20, 0.25
	opts, err = containerOptions(cfg, spec.Name, spec)
	if err != nil {
		t.Fatalf("containerOptions with a network: %v", err)
	}
	if opts.HostConfig.NetworkMode != "net-1" || !cmp.Equal(opts.NetworkingConfig.EndpointsConfig["net-1"].Aliases, []string{"db"}) {
		t.Errorf("network = %q %v, want net-1 with alias db", opts.HostConfig.NetworkMode, opts.NetworkingConfig)
	}
	if opts.HostConfig.Memory != 1<<20 || opts.HostConfig.NanoCPUs != 25e7 {
		t.Errorf("limits = %d, %d; want the spec's", opts.HostConfig.Memory, opts.HostConfig.NanoCPUs)
	}
	if opts.HostConfig.ShmSize != 0 {
		t.Errorf("shm size = %d, want the engine's default", opts.HostConfig.ShmSize)
	}
	spec.ShmSize = 256 << 20
	spec.Join = []agentenv.NetworkJoin{{Network: "net-2", Aliases: []string{"gateway"}}}
	if opts, err = containerOptions(cfg, spec.Name, spec); err != nil || opts.HostConfig.ShmSize != 256<<20 || opts.HostConfig.NetworkMode != "net-1" {
		t.Errorf("a spec's shm size and a second network: %v, shm %d, network %q", err, opts.HostConfig.ShmSize, opts.HostConfig.NetworkMode)
	}
}

func TestContainerOptions_Invalid(t *testing.T) {
	tests := []struct {
		name string
		edit func(*agentenv.SandboxSpec)
	}{
		{"no record label", func(s *agentenv.SandboxSpec) { delete(s.Labels, agentenv.LabelRecord) }},
		{"bad name", func(s *agentenv.SandboxSpec) { s.Name = "bad name"; s.Labels[agentenv.LabelRecord] = "bad name" }},
		{"empty name", func(s *agentenv.SandboxSpec) { s.Name = ""; s.Labels[agentenv.LabelRecord] = "" }},
		{"no image", func(s *agentenv.SandboxSpec) { s.Image = "" }},
		{"port 0", func(s *agentenv.SandboxSpec) { s.Ports = []int{0} }},
		{"port too big", func(s *agentenv.SandboxSpec) { s.Ports = []int{70000} }},
		{"negative memory", func(s *agentenv.SandboxSpec) { s.Memory = -1 }},
		{"aliases without network", func(s *agentenv.SandboxSpec) { s.Aliases = []string{"x"} }},
		{"bad network", func(s *agentenv.SandboxSpec) { s.Network = "a b" }},
		{"join without network", func(s *agentenv.SandboxSpec) { s.Join = []agentenv.NetworkJoin{{Network: "net-2"}} }},
		{"bad join network", func(s *agentenv.SandboxSpec) {
			s.Network, s.Join = "net-1", []agentenv.NetworkJoin{{Network: "a b"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.edit(&s)
			if _, err := containerOptions(Config{}, s.Name, s); !errors.Is(err, agentenv.ErrInvalid) {
				t.Errorf("containerOptions = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	p8080, _ := network.PortFrom(8080, network.TCP)
	p53, _ := network.PortFrom(53, network.UDP)
	p9090, _ := network.PortFrom(9090, network.TCP)
	got := endpointsFromBindings(network.PortMap{
		p8080: {{HostIP: netip.MustParseAddr("::1"), HostPort: "40000"}, {HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: "49153"}},
		p53:   {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: "5353"}},
		p9090: {{HostPort: "49154"}},
	})
	want := map[string]string{"8080": "127.0.0.1:49153", "9090": "127.0.0.1:49154"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("endpointsFromBindings (-want +got):\n%s", diff)
	}
	got = endpointsFromSummary([]container.PortSummary{
		{IP: netip.MustParseAddr("127.0.0.1"), PrivatePort: 8080, PublicPort: 49153, Type: "tcp"},
		{PrivatePort: 9090, Type: "tcp"}, // exposed, not published
		{IP: netip.MustParseAddr("127.0.0.1"), PrivatePort: 53, PublicPort: 5353, Type: "udp"},
	})
	if diff := cmp.Diff(map[string]string{"8080": "127.0.0.1:49153"}, got); diff != "" {
		t.Errorf("endpointsFromSummary (-want +got):\n%s", diff)
	}
}

func TestExitCodeFromStatus(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"Exited (137) 5 seconds ago", 137},
		{"Exited (0) About a minute ago", 0},
		{"Up 3 seconds", 0},
		{"Exited (x)", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := exitCodeFromStatus(tt.in); got != tt.want {
			t.Errorf("exitCodeFromStatus(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestGrouper(t *testing.T) {
	g := newGrouper("docker")
	l := func(id string) map[string]string { return map[string]string{agentenv.LabelRecord: id} }
	g.container(container.Summary{Labels: l("a"), State: container.StateExited, Status: "Exited (1) now", Created: 10})
	g.container(container.Summary{Labels: l("a"), State: container.StateRunning, Created: 5})
	g.container(container.Summary{Labels: l("b"), State: container.StateExited, Status: "Exited (0) now"})
	g.container(container.Summary{Labels: l("b"), State: container.StateDead, Status: "Dead (3)"})
	g.container(container.Summary{Labels: l("c"), State: container.StateCreated})
	g.other(l("d"), time.Unix(7, 0))
	g.other(l("a"), time.Unix(1, 0))
	var got []string
	for _, sb := range g.sandboxes() {
		got = append(got, sb.ID+":"+string(sb.State)+":"+strings.Repeat("!", sb.ExitCode%4))
	}
	want := []string{"a:running:", "b:exited:!!!", "c:creating:", "d:running:"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if sbs := g.sandboxes(); sbs[0].Created.Unix() != 1 {
		t.Errorf("created of a = %v, want the earliest (1)", sbs[0].Created.Unix())
	}
}

func TestNew_Defaults(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///from/env.sock")
	p, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "docker" || p.Host() != "unix:///from/env.sock" || p.cfg.StopGrace != time.Second {
		t.Errorf("New(Config{}) = name %q host %q grace %v", p.Name(), p.Host(), p.cfg.StopGrace)
	}
	p, err = New(Config{Name: "local", Host: "unix:///x.sock"}, nil)
	if err != nil || p.Name() != "local" || p.Host() != "unix:///x.sock" {
		t.Errorf("New(named) = %v, %v", p, err)
	}
	caps := p.Capabilities()
	if !caps.OnThisMachine || !caps.ListByLabel || caps.BackstopLifetime {
		t.Errorf("Capabilities = %+v", caps)
	}
	want := []agentenv.Ability{agentenv.AbilityNetworks, agentenv.AbilityVMs, agentenv.AbilityExec, agentenv.AbilityAttach, agentenv.AbilityFiles, agentenv.AbilityImages, agentenv.AbilityLogs, agentenv.AbilityImageBuild, agentenv.AbilityVolumes}
	if got := agentenv.AbilitiesOf(p).List(); !slices.Equal(got, want) {
		t.Errorf("abilities = %v, want %v", got, want)
	}
	if _, err := New(Config{Host: "no-scheme"}, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("New(bogus host) = %v, want ErrInvalid", err)
	}
}

func TestCreate_RecordLabelMustBeTheName(t *testing.T) {
	p, err := New(Config{Host: "unix:///nonexistent.sock"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := validSpec()
	s.Labels[agentenv.LabelRecord] = "r-2"
	if _, err := p.Create(t.Context(), s); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Create with another record label = %v, want ErrInvalid before any engine call", err)
	}
}

func TestImageContext(t *testing.T) {
	ctx, err := imageContext(agentenv.ImageSpec{Name: "snap-x", Base: "pg:15",
		Files:  map[string][]byte{"/agentenv/snapshot.sql": []byte("SELECT 1;")},
		Labels: map[string]string{agentenv.LabelRecord: "snap-x", "note": `a "$HOME" \ b`}})
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(ctx))
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	want := "FROM pg:15\nLABEL \"agentenv.record\"=\"snap-x\" \"note\"=\"a \\\"\\$HOME\\\" \\\\ b\"\nADD files.tar /\n"
	if got := string(files["Dockerfile"]); got != want {
		t.Errorf("Dockerfile =\n%s\nwant\n%s", got, want)
	}
	inner := tar.NewReader(bytes.NewReader(files["files.tar"]))
	var names []string
	for {
		h, err := inner.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if !slices.Equal(names, []string{"agentenv/", "agentenv/snapshot.sql"}) {
		t.Errorf("files.tar holds %v, want the dump under agentenv/", names)
	}
}

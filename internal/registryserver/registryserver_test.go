package registryserver

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/internal/testproc"
	"gopkg.in/yaml.v3"
)

// startOn runs Start on a testproc.Recorder and returns what it returned or the message it failed with.
func startOn(t *testing.T, o Options) (*Server, string) {
	tb := &testproc.Recorder{TB: t}
	var got *Server
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = Start(tb, o)
	}()
	<-done
	return got, tb.Stopped
}

func TestBinary_paths(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("AGENTENV_REGISTRY_CACHE", cache)
	if got, err := Binary(); err != nil || got != filepath.Join(cache, "registry-"+Version, "registry") {
		t.Errorf("Binary() with AGENTENV_REGISTRY_CACHE = %q, %v", got, err)
	}
	xdg := t.TempDir()
	t.Setenv("AGENTENV_REGISTRY_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", xdg)
	if got, err := Binary(); err != nil || got != filepath.Join(xdg, "agentenv", "registry", "registry-"+Version, "registry") {
		t.Errorf("Binary() with XDG_CACHE_HOME = %q, %v", got, err)
	}
}

func TestStart_noBinaryFailsNamingTheBuild(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("AGENTENV_REGISTRY_CACHE", cache)
	got, msg := startOn(t, Options{})
	if got != nil {
		t.Fatalf("Start = %+v with no binary, want a failure", got)
	}
	want := filepath.Join(cache, "registry-"+Version, "registry")
	for _, s := range []string{"bash scripts/registry/build.sh", want} {
		if !strings.Contains(msg, s) {
			t.Errorf("failure %q does not name %s", msg, s)
		}
	}
}

func TestStart_userWithoutPasswordFails(t *testing.T) {
	t.Setenv("AGENTENV_REGISTRY_CACHE", t.TempDir())
	got, msg := startOn(t, Options{User: "alice"})
	if got != nil || !strings.Contains(msg, "Password") {
		t.Fatalf("Start(User without Password) = %+v, failure %q; want a failure naming Password", got, msg)
	}
}

// registryConfig is the part of the registry's configuration config writes.
type registryConfig struct {
	Version string
	Log     struct {
		Level     string
		AccessLog struct{ Disabled bool }
	}
	Storage struct {
		Filesystem struct{ RootDirectory string }
		Delete     struct{ Enabled bool }
	}
	HTTP struct{ Addr, Secret string }
	Auth map[string]struct{ Realm, Path string }
}

func parseConfig(t *testing.T, b []byte) registryConfig {
	t.Helper()
	var c registryConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("config is not YAML: %v\n%s", err, b)
	}
	return c
}

func TestConfig(t *testing.T) {
	root := `/tmp/a dir/with "quotes" and é`
	c := parseConfig(t, config("127.0.0.1:5000", root, "", "s3cret"))
	if c.Version != "0.1" || c.Log.Level != "warn" || !c.Log.AccessLog.Disabled {
		t.Errorf("version %q, log level %q, access log disabled %v; want 0.1, warn, true", c.Version, c.Log.Level, c.Log.AccessLog.Disabled)
	}
	if c.Storage.Filesystem.RootDirectory != root || !c.Storage.Delete.Enabled {
		t.Errorf("storage root %q, delete %v; want %q, true", c.Storage.Filesystem.RootDirectory, c.Storage.Delete.Enabled, root)
	}
	if c.HTTP.Addr != "127.0.0.1:5000" || c.HTTP.Secret != "s3cret" {
		t.Errorf("http %+v, want addr 127.0.0.1:5000 and the secret", c.HTTP)
	}
	if c.Auth != nil {
		t.Errorf("auth %+v without an htpasswd file, want none", c.Auth)
	}

	c = parseConfig(t, config("127.0.0.1:5000", root, "/tmp/x/htpasswd", "s3cret"))
	if got := slices.Collect(maps.Keys(c.Auth)); !slices.Equal(got, []string{"htpasswd"}) {
		t.Fatalf("auth methods %v, want [htpasswd]", got)
	}
	if h := c.Auth["htpasswd"]; h.Realm != Realm || h.Path != "/tmp/x/htpasswd" {
		t.Errorf("htpasswd auth %+v, want realm %q and the file", h, Realm)
	}
}

func TestBlobPath(t *testing.T) {
	s := &Server{Root: "/r"}
	hex := strings.Repeat("ab", 32)
	if got, want := s.BlobPath("sha256:"+hex), "/r/docker/registry/v2/blobs/sha256/ab/"+hex+"/data"; got != want {
		t.Errorf("BlobPath = %s, want %s", got, want)
	}
	for _, bad := range []string{"", "sha256", "sha256:a", ":abcd", "sha256:../../etc"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("BlobPath(%q) did not panic", bad)
				}
			}()
			s.BlobPath(bad)
		}()
	}
}

func TestChildEnvDropsRegistryOverrides(t *testing.T) {
	got := childEnv([]string{"HOME=/root", "REGISTRY_HTTP_ADDR=0.0.0.0:80", "PATH=/bin", "XREGISTRY_Y=1"})
	if want := []string{"HOME=/root", "PATH=/bin", "XREGISTRY_Y=1"}; !slices.Equal(got, want) {
		t.Errorf("childEnv = %v, want %v", got, want)
	}
}

package lifecycle_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
)

// A sandbox whose spec carries a build is created on a provider that builds in its VM, its
// create bounded by the create timeout plus the build's (recorded for gc), the built image's
// reference kept; a provider that does not, a build on another kind, and a negative build
// timeout are refused before any record.
func TestCreateBuildInVM(t *testing.T) {
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	vm := fake.New("vm", agentenv.AbilityImageBuild).BuildInVM()
	m, err := lifecycle.New(lifecycle.Config{Ledger: led, CreateTimeout: time.Minute,
		Providers: map[string]agentenv.Provider{"vm": vm, "plain": fake.New("plain")}})
	if err != nil {
		t.Fatal(err)
	}
	b := buildContext(t)
	for _, c := range []struct {
		name string
		req  lifecycle.CreateRequest
		want string
	}{
		{"provider without", lifecycle.CreateRequest{Provider: "plain", Spec: agentenv.SandboxSpec{Build: &b}}, "builds no image inside"},
		{"not a sandbox", lifecycle.CreateRequest{Provider: "vm", Kind: agentenv.KindVM, Spec: agentenv.SandboxSpec{Build: &b}}, "not a vm"},
		{"negative timeout", lifecycle.CreateRequest{Provider: "vm", Spec: agentenv.SandboxSpec{Build: &b}, BuildTimeout: -time.Second}, "build timeout"},
		{"image too", lifecycle.CreateRequest{Provider: "vm", Spec: agentenv.SandboxSpec{Image: "x", Build: &b}}, "want one of them"},
	} {
		if _, _, err := m.Create(t.Context(), c.req); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Create = %v, want ErrInvalid saying %q", c.name, err, c.want)
		}
	}
	if recs, err := led.List(t.Context(), agentenv.Filter{}); err != nil || len(recs) != 0 {
		t.Fatalf("records after refused creates: %+v, %v; want none", recs, err)
	}

	rec, sb, err := m.Create(t.Context(), lifecycle.CreateRequest{Provider: "vm", Spec: agentenv.SandboxSpec{Build: &b}, BuildTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("Create with a build: %v", err)
	}
	if sb.Image == "" || vm.Calls("create_image") != 0 {
		t.Errorf("sandbox image %q, %d image builds; want the image built in the VM, no image build", sb.Image, vm.Calls("create_image"))
	}
	stored, err := led.Get(t.Context(), rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Attrs[agentenv.AttrCreateTimeout] != (3*time.Minute).String() || stored.Attrs[agentenv.AttrImageRef] != sb.Image {
		t.Errorf("record attrs %v, want create timeout 3m0s (1m + the build's 2m) and the image %s", stored.Attrs, sb.Image)
	}
	if _, err := m.Teardown(t.Context(), []agentenv.Record{stored}); err != nil {
		t.Fatal(err)
	}
	if got := vm.Images(); len(got) != 0 {
		t.Errorf("images after the teardown: %v, want none (the build goes with its VM)", got)
	}
}

package lifecycle_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
)

// TestAttach: the manager's door to a process in a sandbox: by record id, through the
// provider's Attacher, refused plainly where the provider has none.
func TestAttach(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	createSpec := lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}}
	rec, _, err := r.mgr.Create(ctx, createSpec)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.mgr.Attach(ctx, rec.ID, []string{"cat"})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	go func() {
		_, _ = st.Write([]byte("ping"))
		_ = st.CloseWrite()
	}()
	if out, err := io.ReadAll(st); err != nil || string(out) != "ping" {
		t.Errorf("read back %q, %v; want ping", out, err)
	}
	if err := st.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := r.mgr.Attach(ctx, "no-such-record", []string{"cat"}); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Attach of an unknown record = %v, want ErrNotFound", err)
	}
	if _, err := r.mgr.TeardownIDs(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}

	plain := fake.New("plain", agentenv.AbilityAttach)
	m, err := lifecycle.New(lifecycle.Config{Ledger: r.led, Providers: map[string]agentenv.Provider{"plain": plain}, Owner: alive})
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err = m.Create(ctx, lifecycle.CreateRequest{Provider: "plain", Spec: createSpec.Spec})
	if err != nil {
		t.Fatal(err)
	}
	defer m.TeardownIDs(context.Background(), rec.ID)
	if _, err := m.Attach(ctx, rec.ID, []string{"cat"}); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "cannot attach") {
		t.Errorf("Attach on a provider without the ability = %v, want ErrInvalid naming it", err)
	}
}

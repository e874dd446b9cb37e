package cloudapi

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
)

func TestCheckRecord(t *testing.T) {
	good := agentenv.SandboxSpec{Name: "rec-1", Labels: map[string]string{agentenv.LabelRecord: "rec-1"}}
	if err := CheckRecord(good); err != nil {
		t.Errorf("CheckRecord(%+v) = %v, want nil", good, err)
	}
	for _, bad := range []agentenv.SandboxSpec{
		{Name: "-rec", Labels: map[string]string{agentenv.LabelRecord: "-rec"}},
		{Name: strings.Repeat("a", 64), Labels: map[string]string{agentenv.LabelRecord: strings.Repeat("a", 64)}},
		{Name: "rec-1", Labels: map[string]string{agentenv.LabelRecord: "rec-2"}},
		{Name: "rec-1"},
	} {
		if err := CheckRecord(bad); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("CheckRecord(%q, %v) = %v, want ErrInvalid", bad.Name, bad.Labels, err)
		}
	}
}

func TestLabelsAddTheExpiryToAFreshMap(t *testing.T) {
	exp := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	spec := agentenv.SandboxSpec{Labels: map[string]string{"a": "1"}, Expires: exp}
	got := Labels(spec)
	want := map[string]string{"a": "1", agentenv.LabelExpires: "2026-01-02T02:04:05Z"}
	if !maps.Equal(got, want) {
		t.Errorf("Labels = %v, want %v", got, want)
	}
	got["b"] = "2"
	if _, ok := spec.Labels["b"]; ok {
		t.Error("Labels returned the spec's own map")
	}
	spec.Labels[agentenv.LabelExpires] = "set"
	if got := Labels(spec)[agentenv.LabelExpires]; got != "set" {
		t.Errorf("Labels overwrote the expiry label with %q", got)
	}
	if got := Labels(agentenv.SandboxSpec{}); got == nil || len(got) != 0 {
		t.Errorf("Labels of no labels = %v, want an empty map", got)
	}
}

func TestPortsRoundTripToEndpoints(t *testing.T) {
	joined := JoinPorts([]int{8080, 9000})
	if joined != "8080,9000" {
		t.Errorf("JoinPorts = %q", joined)
	}
	got := Endpoints(joined+",x", func(port int) string { return "https://" + JoinPorts([]int{port}) + ".example" })
	want := map[string]string{"8080": "https://8080.example", "9000": "https://9000.example"}
	if !maps.Equal(got, want) {
		t.Errorf("Endpoints = %v, want %v", got, want)
	}
	if got := Endpoints("", nil); got != nil {
		t.Errorf("Endpoints of no ports = %v, want nil", got)
	}
}

func TestAwaitPollsUntilDoneFailsOrTheDeadline(t *testing.T) {
	calls := 0
	v, err := Await(context.Background(), "sandbox s", func(context.Context) (int, string, bool, error) {
		calls++
		return calls, "pending", calls == 3, nil
	})
	if v != 3 || err != nil {
		t.Errorf("Await = %d, %v; want 3, nil after three polls", v, err)
	}
	boom := errors.New("gone")
	if v, err := Await(context.Background(), "sandbox s", func(context.Context) (int, string, bool, error) {
		return 7, "terminated", false, boom
	}); v != 7 || err != boom {
		t.Errorf("Await of a failing check = %d, %v; want its value and error as they are", v, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Millisecond)
	defer cancel()
	start := time.Now()
	v, err = Await(ctx, "sandbox s", func(context.Context) (int, string, bool, error) { return 1, "pending", false, nil })
	if v != 0 || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for sandbox s to run (pending)") {
		t.Errorf("Await past its deadline = %d, %v; want 0 and the wait named, wrapping the deadline", v, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Await took %s past a 120ms deadline", took)
	}
}

func TestCheckImages(t *testing.T) {
	if err := CheckImages("", "universal", "node:24", "ghcr.io/acme/vm@sha256:abc"); err != nil {
		t.Errorf("CheckImages of good names = %v", err)
	}
	if err := CheckImages("ok", "bad image"); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), `"bad image"`) {
		t.Errorf("CheckImages of a bad name = %v, want ErrInvalid naming it", err)
	}
}

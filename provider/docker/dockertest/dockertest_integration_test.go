//go:build integration

package dockertest_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// recorder is a testing.TB that records failures and cleanups instead of acting on them.
type recorder struct {
	testing.TB
	errors   []string
	cleanups []func()
}

func (r *recorder) Helper()          {}
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); panic("fatal") }

func (r *recorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func newLabels() map[string]string {
	b := make([]byte, 8)
	rand.Read(b)
	id := "t-" + hex.EncodeToString(b)
	return map[string]string{"agentenv.record": id, "agentenv.test": id}
}

func TestCheckNoLeftovers_FailsAndRemoves(t *testing.T) {
	cli := dockertest.Require(t)
	labels := newLabels()
	dockertest.CheckNoLeftovers(t, cli, labels) // the real check: the fake's cleanup must remove all

	rec := &recorder{TB: t}
	dockertest.CheckNoLeftovers(rec, cli, labels)
	name := labels["agentenv.record"]
	if _, err := cli.NetworkCreate(t.Context(), name, client.NetworkCreateOptions{Labels: labels}); err != nil {
		t.Fatalf("create network: %v", err)
	}
	if _, err := cli.VolumeCreate(t.Context(), client.VolumeCreateOptions{Name: name, Labels: labels}); err != nil {
		t.Fatalf("create volume: %v", err)
	}
	left, err := dockertest.Leftovers(t.Context(), cli, labels)
	if err != nil || len(left) != 2 {
		t.Errorf("Leftovers = %v, %v; want the network and the volume", left, err)
	}
	rec.runCleanups()
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "network "+name) || !strings.Contains(rec.errors[0], "volume "+name) {
		t.Errorf("CheckNoLeftovers reported %q, want one failure naming the network and the volume", rec.errors)
	}
	if left, err := dockertest.Leftovers(t.Context(), cli, labels); err != nil || len(left) != 0 {
		t.Errorf("Leftovers after the check = %v, %v; want none", left, err)
	}
}

func TestCheckNoLeftovers_Clean(t *testing.T) {
	cli := dockertest.Require(t)
	rec := &recorder{TB: t}
	dockertest.CheckNoLeftovers(rec, cli, newLabels())
	rec.runCleanups()
	if len(rec.errors) != 0 {
		t.Errorf("CheckNoLeftovers with nothing left reported %q", rec.errors)
	}
}

func TestLeftovers_RefusesEmptyFilter(t *testing.T) {
	cli := dockertest.Require(t)
	if _, err := dockertest.Leftovers(t.Context(), cli, nil); err == nil {
		t.Errorf("Leftovers(no labels) = nil error; an empty filter matches everything")
	}
	if err := dockertest.Remove(t.Context(), cli, map[string]string{}); err == nil {
		t.Errorf("Remove(no labels) = nil error; an empty filter matches everything")
	}
}

func TestTestImage(t *testing.T) {
	tag := dockertest.TestImage(t)
	if again := dockertest.TestImage(t); again != tag || !strings.HasPrefix(tag, "agentenv-testserver:") {
		t.Errorf("TestImage = %q then %q, want one agentenv-testserver tag", tag, again)
	}
}

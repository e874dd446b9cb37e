package emuvm

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/agentenv/agentenv"
)

// brokenMachine is a Machine whose removal fails (the real one is a Docker-in-Docker container,
// in the integration tier).
type brokenMachine struct{ removed *atomic.Int32 }

func (brokenMachine) Run(context.Context, string, io.Reader) (agentenv.ExecResult, error) {
	return agentenv.ExecResult{}, nil
}
func (brokenMachine) Addr(int) string { return "" }
func (m brokenMachine) Remove(context.Context) error {
	m.removed.Add(1)
	return errors.New("stuck")
}

func TestReaperKeepsFailedRemovals(t *testing.T) {
	var r Reaper
	var n atomic.Int32
	r.Remove("sb-1", brokenMachine{&n})
	r.Go(func() { r.Remove("sb-2", brokenMachine{&n}) })
	r.Wait()
	if errs := r.Errors(); n.Load() != 2 || len(errs) != 2 {
		t.Errorf("removed %d, errors %v; want both tried and both kept", n.Load(), errs)
	}
}

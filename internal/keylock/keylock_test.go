package keylock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestLockSerializesOneKeyOnly(t *testing.T) {
	var s Set
	unlock := s.Lock("a")
	other := make(chan struct{})
	go func() { s.Lock("b")(); close(other) }()
	select {
	case <-other:
	case <-time.After(5 * time.Second):
		t.Fatal("key b waited for key a")
	}
	same := make(chan struct{})
	go func() { s.Lock("a")(); close(same) }()
	select {
	case <-same:
		t.Fatal("key a was taken twice")
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	<-same
	s.Forget("a")
	s.Forget("never")
	var wg sync.WaitGroup
	n := 0
	for range 50 {
		wg.Go(func() {
			defer s.Lock("c")()
			n++
		})
	}
	wg.Wait()
	if n != 50 {
		t.Errorf("n = %d under the lock, want 50", n)
	}
}

func TestLockContextGivesUpWithItsContext(t *testing.T) {
	var s Set
	unlock := s.Lock("a")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		u, err := s.LockContext(ctx, "a")
		if u != nil {
			u()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("LockContext of a held key returned %v before its context ended", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("LockContext cancelled while waiting = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LockContext went on waiting after its context was cancelled")
	}
	unlock()
	// The cancelled waiter holds nothing: the key is free at once.
	got := make(chan struct{})
	go func() { s.Lock("a")(); close(got) }()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the key stayed held after the cancelled LockContext")
	}
	if u, err := s.LockContext(ctx, "b"); err == nil || u != nil {
		t.Errorf("LockContext with an ended context = %v, %v; want its error and no unlock", u != nil, err)
	}
	u, err := s.LockContext(t.Context(), "b")
	if err != nil {
		t.Fatalf("LockContext of a free key = %v", err)
	}
	u()
}

func TestForgetPrefixDropsOnlyThoseKeys(t *testing.T) {
	var s Set
	for _, k := range []string{"vm", "vm\x00net", "vm\x00img", "vm2"} {
		s.Lock(k)()
	}
	held := s.Lock("vm\x00net")
	s.ForgetPrefix("vm\x00")
	if _, ok := s.m["vm2"]; !ok || len(s.m) != 2 {
		t.Errorf("keys left %d, want vm and vm2", len(s.m))
	}
	// The holder keeps its own lock; the key is made anew.
	s.Lock("vm\x00net")()
	held()
}

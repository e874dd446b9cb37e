package keylock

import (
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

// Package keylock is a set of locks by key, each made on first use: what a VM-mode provider
// holds to serialize what it does to one VM (choose its port slots, change its exposed ports,
// load an image into it) while other VMs go on.
package keylock

import (
	"context"
	"strings"
	"sync"
)

// Set is a set of locks by key. The zero value is ready; it is safe for concurrent use.
type Set struct {
	mu sync.Mutex
	m  map[string]chan struct{} // a key's lock is held while its channel holds a value
}

// lock returns key's lock, made on first use.
func (s *Set) lock(key string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]chan struct{}{}
	}
	l, ok := s.m[key]
	if !ok {
		l = make(chan struct{}, 1)
		s.m[key] = l
	}
	return l
}

// Lock locks key, waiting for its holder, and returns its unlock.
func (s *Set) Lock(key string) (unlock func()) {
	l := s.lock(key)
	l <- struct{}{}
	return func() { <-l }
}

// LockContext locks key as Lock does unless ctx ends first, in which case it returns ctx's
// error and holds nothing.
func (s *Set) LockContext(ctx context.Context, key string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := s.lock(key)
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Forget drops key's lock, once what it guarded is gone; a holder keeps its own.
func (s *Set) Forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// ForgetPrefix drops the lock of every key that starts with prefix, as Forget does.
func (s *Set) ForgetPrefix(prefix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.m {
		if strings.HasPrefix(k, prefix) {
			delete(s.m, k)
		}
	}
}

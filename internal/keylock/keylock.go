// Package keylock is a set of mutexes by key, each made on first use: what a VM-mode provider
// holds to serialize what it does to one VM (choose its port slots, change its exposed ports)
// while other VMs go on.
package keylock

import "sync"

// Set is a set of mutexes by key. The zero value is ready; it is safe for concurrent use.
type Set struct {
	mu sync.Mutex
	m  map[string]*sync.Mutex
}

// Lock locks key's mutex, waiting for its holder, and returns its unlock.
func (s *Set) Lock(key string) (unlock func()) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]*sync.Mutex{}
	}
	l, ok := s.m[key]
	if !ok {
		l = &sync.Mutex{}
		s.m[key] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Forget drops key's mutex, once what it guarded is gone; a holder keeps its own.
func (s *Set) Forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

package soak

import (
	"context"
	"errors"
	"maps"
	"sync"
)

// fakeEngine is an in-memory Engine for unit tests.
type fakeEngine struct {
	mu    sync.Mutex
	res   []Resource
	err   error
	stuck map[string]bool // ids RemoveAll keeps, as an engine with a stale endpoint keeps a network
}

func (f *fakeEngine) List(_ context.Context, labels map[string]string) ([]Resource, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(labels) == 0 {
		return nil, errors.New("empty filter")
	}
	if f.err != nil {
		return nil, f.err
	}
	var out []Resource
	for _, r := range f.res {
		ok := true
		for k, v := range labels {
			ok = ok && r.Labels[k] == v
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeEngine) remove(match func(Resource) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keep []Resource
	for _, r := range f.res {
		if !match(r) {
			keep = append(keep, r)
		}
	}
	f.res = keep
}

func (f *fakeEngine) Kill(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.res {
		if f.res[i].ID == id {
			f.res[i].Running = false
		}
	}
	return nil
}

func (f *fakeEngine) Remove(_ context.Context, id string) error {
	f.remove(func(r Resource) bool { return r.ID == id })
	return nil
}

func (f *fakeEngine) RemoveAll(_ context.Context, labels map[string]string) error {
	f.remove(func(r Resource) bool {
		if f.stuck[r.ID] {
			return false
		}
		for k, v := range labels {
			if r.Labels[k] != v {
				return false
			}
		}
		return true
	})
	return nil
}

func fakeContainer(name string, labels map[string]string) Resource {
	return Resource{Kind: "container", ID: "id-" + name, Name: name, Running: true, Labels: maps.Clone(labels)}
}

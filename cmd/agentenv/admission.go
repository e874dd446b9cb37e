package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
)

// capacitor is a provider that can say what its backend holds (docker's docker info).
type capacitor interface {
	Capacity(ctx context.Context) (cpus int, memory int64, err error)
}

// capacityOf returns p's sizing function for admission, or nil if p cannot say.
func capacityOf(p agentenv.Provider) lifecycle.CapacityFunc {
	c, ok := p.(capacitor)
	if !ok {
		return nil
	}
	return func(ctx context.Context) (lifecycle.Capacity, error) {
		cpus, mem, err := c.Capacity(ctx)
		return lifecycle.Capacity{CPUs: cpus, Memory: mem}, err
	}
}

// admission reads the lifecycle.max_parallel_creates and lifecycle.admit_wait settings.
func (a *app) admission(sizes map[string]lifecycle.CapacityFunc) (lifecycle.Config, error) {
	cfg := lifecycle.Config{Capacity: sizes}
	if s := strings.TrimSpace(a.cfg.Raw("lifecycle.max_parallel_creates")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return cfg, fmt.Errorf("lifecycle.max_parallel_creates: want a count (0: sized from the provider), got %q: %w", s, agentenv.ErrInvalid)
		}
		cfg.MaxParallelCreates = n
	}
	var err error
	if cfg.AdmitWait, err = a.cfg.Duration("lifecycle.admit_wait"); err != nil {
		return cfg, err
	}
	return cfg, nil
}

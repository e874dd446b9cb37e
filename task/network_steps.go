package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
)

// deployNetwork creates a private network through the lifecycle manager, which deploy_sandbox
// steps join (network: ID) to reach each other by their aliases. It is a record of the run,
// torn down with the episode after the sandboxes on it.
type deployNetwork struct {
	Provider string `yaml:"provider"` // a provider with networks; the run's --provider (its first member) if empty
	TTL      string `yaml:"ttl"`      // lifetime until gc may remove it; lifecycle's default if empty
	// Isolated cuts the network off everything outside it (a Harbor task without internet):
	// on a provider that cannot (Capabilities.Isolate), the step fails rather than run the
	// task with the internet it was not to have.
	Isolated bool `yaml:"isolated"`
}

func (s *deployNetwork) Check() error {
	if s.TTL != "" {
		if d, err := time.ParseDuration(s.TTL); err != nil || d <= 0 {
			return fmt.Errorf("ttl: want a positive duration such as \"10m\", got %q", s.TTL)
		}
	}
	return nil
}

func (s *deployNetwork) Refs() []Ref { return nil }

func (s *deployNetwork) Run(ctx context.Context, sc *scope) (Result, error) {
	m := sc.e.r.Manager
	members, err := sc.providers(s.Provider)
	if err != nil {
		return Result{}, err
	}
	// A network lives on one provider, and the sandboxes that join it are made there.
	p := members[0]
	ok, err := m.Supports(p, agentenv.AbilityNetworks)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return Result{}, fmt.Errorf("provider %s has no private networks: run the task on one that has (docker, kubernetes): %w", p, agentenv.ErrInvalid)
	}
	if s.Isolated {
		caps, err := m.Capabilities(p)
		if err != nil {
			return Result{}, err
		}
		if !caps.Isolate {
			return Result{}, fmt.Errorf("isolated: provider %s cannot cut a network off the internet: run the task on one that can (docker, kubernetes): %w", p, agentenv.ErrInvalid)
		}
	}
	ttl, _ := time.ParseDuration(s.TTL)
	rec, _, err := m.Create(ctx, lifecycle.CreateRequest{
		Provider: p, Kind: agentenv.KindNetwork, Run: sc.e.id, Role: agentenv.TaskRole(sc.s.ID), TTL: ttl,
		Spec: agentenv.SandboxSpec{Isolated: s.Isolated},
	})
	if err != nil {
		return Result{}, fmt.Errorf("private network: %w", err)
	}
	return Result{Outputs: map[string]string{"network": rec.ID, "provider": rec.Provider}}, nil
}

// failureOf is failure with e.mu taken.
func (e *episode) failureOf(id string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failure(id)
}

// Healthcheck defaults: Docker's, but for the interval (Docker's 30 s would hold a step that
// much past a service's start).
const (
	DefaultHealthInterval = time.Second
	DefaultHealthTimeout  = 30 * time.Second
	DefaultHealthRetries  = 3
)

// healthcheck is deploy_sandbox's healthcheck: a shell command run in the sandbox until it
// exits 0, as Docker's HEALTHCHECK CMD-SHELL. Failures within the start period do not count.
type healthcheck struct {
	Command        string  `yaml:"command" task:"required"` // run with sh -c
	IntervalSec    float64 `yaml:"interval_sec"`            // between tries; DefaultHealthInterval if 0
	TimeoutSec     float64 `yaml:"timeout_sec"`             // bound on each try; DefaultHealthTimeout if 0
	Retries        int     `yaml:"retries"`                 // failures after the start period that fail the step; DefaultHealthRetries if 0
	StartPeriodSec float64 `yaml:"start_period_sec"`        // failures within it do not count; 0 if unset
}

func (h *healthcheck) check() error {
	switch {
	case h.Command == "":
		return errors.New("command: want a shell command")
	case h.IntervalSec < 0:
		return fmt.Errorf("interval_sec: want 0 (the default, %s) or more, got %g", DefaultHealthInterval, h.IntervalSec)
	case h.TimeoutSec < 0:
		return fmt.Errorf("timeout_sec: want 0 (the default, %s) or more, got %g", DefaultHealthTimeout, h.TimeoutSec)
	case h.Retries < 0:
		return fmt.Errorf("retries: want 0 (the default, %d) or more, got %d", DefaultHealthRetries, h.Retries)
	case h.StartPeriodSec < 0:
		return fmt.Errorf("start_period_sec: want 0 or more, got %g", h.StartPeriodSec)
	}
	return nil
}

// secs is n seconds, or def if n is 0.
func secs(n float64, def time.Duration) time.Duration {
	if n == 0 {
		return def
	}
	return time.Duration(n * float64(time.Second))
}

// wait runs the command in record until it exits 0: each try bounded by the timeout, at most
// Retries failures after the start period, all within ctx. It fails with the last try's output.
func (h *healthcheck) wait(ctx context.Context, m *lifecycle.Manager, record string, log *slog.Logger) error {
	interval, timeout := secs(h.IntervalSec, DefaultHealthInterval), secs(h.TimeoutSec, DefaultHealthTimeout)
	retries := h.Retries
	if retries == 0 {
		retries = DefaultHealthRetries
	}
	counted := time.Now().Add(secs(h.StartPeriodSec, 0))
	argv := []string{"sh", "-c", h.Command}
	tries, failures := 0, 0
	var last string
	for {
		tries++
		tctx, cancel := context.WithTimeout(ctx, timeout)
		res, err := m.Exec(tctx, record, argv)
		expired := tctx.Err() != nil
		cancel()
		switch {
		case err == nil && res.ExitCode == 0:
			log.Debug("healthcheck passed", "record_id", record, "tries", tries)
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("healthcheck %q did not pass within the step's timeout (%d tries; last: %s): %w", h.Command, tries, orNone(last), ctx.Err())
		case expired:
			last = "timed out after " + timeout.String()
		case err != nil:
			last = err.Error()
		default:
			last = "exit " + strconv.Itoa(res.ExitCode) + ": " + tail(string(res.Stdout)+string(res.Stderr), 500)
		}
		if time.Now().After(counted) {
			failures++
		}
		if failures >= retries {
			return fmt.Errorf("healthcheck %q failed %d times (%d tries): last: %s", h.Command, failures, tries, last)
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("healthcheck %q did not pass within the step's timeout (%d tries; last: %s): %w", h.Command, tries, last, ctx.Err())
		case <-t.C:
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

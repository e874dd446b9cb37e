package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/ledger"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/spec"
)

// app is what every command shares: settings, output streams, and the ledger, providers and
// lifecycle manager, opened on first use and closed when the command returns.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	flags struct {
		config, ledger, provider, logLevel string
	}
	cfg *config.Config
	log *slog.Logger

	led agentenv.Ledger
	mgr *lifecycle.Manager
}

// getenv is os.Getenv with --config in place of $AGENTENV_CONFIG when given: the flag is this
// command's, not the process environment's.
func (a *app) getenv(key string) string {
	if key == "AGENTENV_CONFIG" && a.flags.config != "" {
		return a.flags.config
	}
	return os.Getenv(key)
}

// load resolves the configuration and the logger; it runs before every command.
func (a *app) load(cmd *cobra.Command) error {
	wd, _ := os.Getwd()
	cfg, err := config.Load(a.getenv, wd)
	if err != nil {
		return err
	}
	set := func(flag, key, v string) {
		if v != "" {
			_ = cfg.Set(key, v, "--"+flag)
		}
	}
	set("ledger", "ledger.dsn", a.flags.ledger)
	set("log-level", "log.level", a.flags.logLevel)
	a.cfg = cfg
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.Raw("log.level"))); err != nil {
		return fmt.Errorf("log.level %q (%s): %w", cfg.Raw("log.level"), source(cfg, "log.level"), agentenv.ErrInvalid)
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Raw("log.format") == "json" {
		a.log = slog.New(slog.NewJSONHandler(a.stderr, opts))
	} else {
		a.log = slog.New(slog.NewTextHandler(a.stderr, opts))
	}
	return nil
}

func source(cfg *config.Config, key string) string {
	for _, v := range cfg.All() {
		if v.Key == key {
			return v.Source
		}
	}
	return "default"
}

// stateDir returns $XDG_STATE_HOME/agentenv (or ~/.local/state/agentenv).
func stateDir() (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("state folder: %w", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "agentenv"), nil
}

// manager opens the ledger and the providers and returns the lifecycle manager.
func (a *app) manager(ctx context.Context) (*lifecycle.Manager, error) {
	if a.mgr != nil {
		return a.mgr, nil
	}
	dsn, err := a.cfg.Get("ledger.dsn")
	if err != nil {
		return nil, err
	}
	if dsn == "" {
		if dsn, err = ledger.DefaultPath(); err != nil {
			return nil, err
		}
	}
	led, err := ledger.Open(ctx, dsn, a.log)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	providers, sizes, err := a.providers()
	if err != nil {
		led.Close()
		return nil, err
	}
	adm, err := a.admission(sizes)
	if err != nil {
		led.Close()
		return nil, err
	}
	var d [6]time.Duration
	for i, key := range []string{"lifecycle.lease", "lifecycle.reclaim_wait", "lifecycle.create_timeout", "lifecycle.terminate_timeout", "lifecycle.call_timeout", "lifecycle.exec_timeout"} {
		if d[i], err = a.cfg.Duration(key); err != nil {
			led.Close()
			return nil, err
		}
	}
	mgr, err := lifecycle.New(lifecycle.Config{
		Ledger: led, Providers: providers, Lease: d[0], ReclaimWait: d[1],
		CreateTimeout: d[2], TerminateTimeout: d[3], CallTimeout: d[4], ExecTimeout: d[5], Logger: a.log,
		MaxParallelCreates: adm.MaxParallelCreates, Capacity: adm.Capacity, AdmitWait: adm.AdmitWait,
	})
	if err != nil {
		led.Close()
		return nil, err
	}
	a.led, a.mgr = led, mgr
	return mgr, nil
}

// providers builds every provider of the table in providers.go. None does I/O until used, so
// an engine or cloud that does not answer fails only the commands that need it, with a message
// naming its address.
// Providers that can say what their backend holds (docker: docker info) also return the
// function that sizes their admission (admission.go).
func (a *app) providers() (map[string]agentenv.Provider, map[string]lifecycle.CapacityFunc, error) {
	providers := map[string]agentenv.Provider{}
	sizes := map[string]lifecycle.CapacityFunc{}
	for _, c := range providerTable {
		p, err := c.build(a)
		if err != nil {
			return nil, nil, fmt.Errorf("provider %s: %w", c.name, err)
		}
		if p != nil {
			providers[c.name] = p
			if f := capacityOf(p); f != nil {
				sizes[c.name] = f
			}
		}
	}
	providers, err := withFaults(providers, os.Getenv("AGENTENV_FAULTS"))
	return providers, sizes, err
}

// withFaults wraps providers with the fault plans of spec, AGENTENV_FAULTS (see
// fault.ParseProviders and `agentenv --help`): the chaos-testing switch the soak, the
// integration tests and users' own chaos runs use to make a real backend misbehave on demand.
func withFaults(providers map[string]agentenv.Provider, spec string) (map[string]agentenv.Provider, error) {
	if spec == "" {
		return providers, nil
	}
	plans, err := fault.ParseProviders(spec, slices.Sorted(maps.Keys(providers)))
	if err != nil {
		return nil, fmt.Errorf("AGENTENV_FAULTS: %w: %w", err, agentenv.ErrInvalid)
	}
	for name, plan := range plans {
		providers[name] = fault.WrapProvider(providers[name], plan)
	}
	return providers, nil
}

// passEnv returns the variables env files' env:NAME references may read: those of env.pass
// (a list, or a comma list) and of the command's --pass-env flags.
func (a *app) passEnv(flags []string) []string {
	var out []string
	for _, n := range strings.Split(a.cfg.Raw("env.pass"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return append(out, flags...)
}

// providerFlag returns the provider chain a command should use: the flag, else the config.
func (a *app) providerFlag(flag string) string {
	if strings.TrimSpace(flag) != "" {
		return flag
	}
	return a.cfg.Raw("provider.default")
}

// close releases the ledger after a command.
func (a *app) close() {
	if a.mgr != nil {
		a.mgr.Close()
	}
	if a.led != nil {
		a.led.Close()
	}
}

// gatewayCaps returns the config keys gateway.max_conns and gateway.max_sessions (0 where
// unset), for deploy.Options: the operator's caps over an env file's.
func (a *app) gatewayCaps() (conns, sessions int, err error) {
	out := [2]int{}
	for i, key := range []string{"gateway.max_conns", "gateway.max_sessions"} {
		v := strings.TrimSpace(a.cfg.Raw(key))
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > spec.MaxGatewayCap {
			return 0, 0, fmt.Errorf("%s %q (%s): want 1-%d: %w", key, v, source(a.cfg, key), spec.MaxGatewayCap, agentenv.ErrInvalid)
		}
		out[i] = n
	}
	return out[0], out[1], nil
}

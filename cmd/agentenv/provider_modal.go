package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/modal"
)

// newModal builds the modal provider (container mode; settings provider.modal.*).
func newModal(a *app) (agentenv.Provider, error) {
	cfg, err := modalConfig(a, "modal")
	if err != nil {
		return nil, err
	}
	return modal.New(cfg, a.log)
}

// newModalVM builds the modal_vm provider: Modal sandboxes on the VM runtime, each hosting a
// whole stack with its own Docker engine (VM mode; settings provider.modal_vm.*).
func newModalVM(a *app) (agentenv.Provider, error) {
	cfg, err := modalConfig(a, "modal_vm")
	if err != nil {
		return nil, err
	}
	if cfg.VMImage, err = a.cfg.Get("provider.modal_vm.image"); err != nil {
		return nil, err
	}
	return modal.NewVM(cfg, a.log)
}

// modalConfig reads the settings provider.NAME.* that both Modal providers share. A token that
// does not resolve is not an error here: the provider then refuses every call, before creating
// anything, with a message naming what to set, so that commands not naming it are unaffected.
func modalConfig(a *app, name string) (modal.Config, error) {
	key := func(k string) string { return "provider." + name + "." + k }
	cfg := modal.Config{Name: name, RegionHint: key("region")}
	var hints []string
	for _, t := range []struct {
		key, env string
		dst      *string
	}{{key("token_id"), "MODAL_TOKEN_ID", &cfg.TokenID}, {key("token_secret"), "MODAL_TOKEN_SECRET", &cfg.TokenSecret}} {
		v, err := a.cfg.Get(t.key)
		switch {
		case err != nil:
			hints = append(hints, fmt.Sprintf("set %s (%v)", t.key, err))
		case v == "":
			hints = append(hints, fmt.Sprintf("set %s (for example env:%s)", t.key, t.env))
		default:
			*t.dst = v
		}
	}
	if len(hints) > 0 {
		cfg.TokenID, cfg.TokenSecret, cfg.CredentialHint = "", "", strings.Join(hints, "; ")
	}
	var err error
	if cfg.App, err = a.cfg.Get(key("app")); err != nil {
		return cfg, err
	}
	if cfg.Region, err = a.cfg.Get(key("region")); err != nil {
		return cfg, err
	}
	regions, err := a.cfg.Get(key("regions"))
	if err != nil {
		return cfg, err
	}
	for r := range strings.SplitSeq(regions, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Regions = append(cfg.Regions, r)
		}
	}
	for k, set := range map[string]func(string) error{
		key("rate"):        func(s string) (err error) { cfg.Rate, err = strconv.ParseFloat(s, 64); return err },
		key("concurrency"): func(s string) (err error) { cfg.Concurrency, err = strconv.Atoi(s); return err },
	} {
		v, err := a.cfg.Get(k)
		if err != nil {
			return cfg, err
		}
		if err := set(v); err != nil {
			return cfg, fmt.Errorf("config: %s = %q: %w", k, v, agentenv.ErrInvalid)
		}
	}
	// The provider lists sandboxes by tag, which Modal's V2 sandboxes do not support yet
	// (SDK v0.11.1: "V2 sandboxes ... are not currently returned by List"): use V1 unless the
	// user chose otherwise.
	if os.Getenv("MODAL_SANDBOX_V2") == "" {
		os.Setenv("MODAL_SANDBOX_V2", "0")
	}
	return cfg, nil
}

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/modal"
)

// newModal builds the modal provider. A token that does not resolve is not an error here: the
// provider then refuses every call, before creating anything, with a message naming what to
// set, so that commands not naming modal are unaffected.
func newModal(a *app) (agentenv.Provider, error) {
	cfg := modal.Config{}
	var hints []string
	for key, dst := range map[string]*string{"provider.modal.token_id": &cfg.TokenID, "provider.modal.token_secret": &cfg.TokenSecret} {
		v, err := a.cfg.Get(key)
		if err != nil || v == "" {
			hints = append(hints, fmt.Sprintf("set %s (for example env:MODAL_TOKEN_ID / env:MODAL_TOKEN_SECRET)", key))
			continue
		}
		*dst = v
	}
	if len(hints) > 0 {
		cfg.TokenID, cfg.TokenSecret, cfg.CredentialHint = "", "", strings.Join(hints, "; ")
	}
	var err error
	if cfg.App, err = a.cfg.Get("provider.modal.app"); err != nil {
		return nil, err
	}
	regions, err := a.cfg.Get("provider.modal.regions")
	if err != nil {
		return nil, err
	}
	for r := range strings.SplitSeq(regions, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Regions = append(cfg.Regions, r)
		}
	}
	if cfg.Region, err = a.cfg.Get("provider.modal.region"); err != nil {
		return nil, err
	}
	for key, set := range map[string]func(string) error{
		"provider.modal.rate":        func(s string) (err error) { cfg.Rate, err = strconv.ParseFloat(s, 64); return err },
		"provider.modal.concurrency": func(s string) (err error) { cfg.Concurrency, err = strconv.Atoi(s); return err },
	} {
		v, err := a.cfg.Get(key)
		if err != nil {
			return nil, err
		}
		if err := set(v); err != nil {
			return nil, fmt.Errorf("config: %s = %q: %w", key, v, agentenv.ErrInvalid)
		}
	}
	// The provider lists sandboxes by tag, which Modal's V2 sandboxes do not support yet
	// (SDK v0.11.1: "V2 sandboxes ... are not currently returned by List"): use V1 unless the
	// user chose otherwise.
	if os.Getenv("MODAL_SANDBOX_V2") == "" {
		os.Setenv("MODAL_SANDBOX_V2", "0")
	}
	return modal.New(cfg, a.log)
}

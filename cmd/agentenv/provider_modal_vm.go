package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/modal"
)

// newModalVM builds the modal_vm provider: Modal sandboxes on the VM runtime, each hosting a
// whole stack with its own Docker engine (VM mode). Its settings are provider.modal_vm.*. As
// for modal, a token that does not resolve is not an error here: the provider then refuses
// every call, before creating anything, with a message naming what to set.
func newModalVM(a *app) (agentenv.Provider, error) {
	cfg := modal.Config{Name: "modal_vm"}
	var hints []string
	for key, dst := range map[string]*string{"provider.modal_vm.token_id": &cfg.TokenID, "provider.modal_vm.token_secret": &cfg.TokenSecret} {
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
	for key, dst := range map[string]*string{
		"provider.modal_vm.app": &cfg.App, "provider.modal_vm.image": &cfg.VMImage, "provider.modal_vm.region": &cfg.Region,
	} {
		if *dst, err = a.cfg.Get(key); err != nil {
			return nil, err
		}
	}
	regions, err := a.cfg.Get("provider.modal_vm.regions")
	if err != nil {
		return nil, err
	}
	for r := range strings.SplitSeq(regions, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Regions = append(cfg.Regions, r)
		}
	}
	cfg.RegionHint = "provider.modal_vm.region"
	for key, set := range map[string]func(string) error{
		"provider.modal_vm.rate":        func(s string) (err error) { cfg.Rate, err = strconv.ParseFloat(s, 64); return err },
		"provider.modal_vm.concurrency": func(s string) (err error) { cfg.Concurrency, err = strconv.Atoi(s); return err },
	} {
		v, err := a.cfg.Get(key)
		if err != nil {
			return nil, err
		}
		if err := set(v); err != nil {
			return nil, fmt.Errorf("config: %s = %q: %w", key, v, agentenv.ErrInvalid)
		}
	}
	// As for modal: List by tag needs Modal's V1 sandboxes.
	if os.Getenv("MODAL_SANDBOX_V2") == "" {
		os.Setenv("MODAL_SANDBOX_V2", "0")
	}
	return modal.NewVM(cfg, a.log)
}

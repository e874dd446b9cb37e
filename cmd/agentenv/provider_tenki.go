package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/tenki"
)

// Config keys whose defaults are the environment variables Tenki's SDKs read.
const (
	tenkiTokenKey  = "provider.tenki.token"   // env:TENKI_AUTH_TOKEN
	tenkiAPIKeyKey = "provider.tenki.api_key" // env:TENKI_API_KEY, when the token resolves to nothing
	tenkiURLKey    = "provider.tenki.api_url" // env:TENKI_API_ENDPOINT, else Tenki's public endpoint
)

// newTenki builds the tenki provider. A token that does not resolve is not an error here: the
// provider then refuses every call, before creating anything, with a message naming what to
// set, so that commands not naming tenki are unaffected and a chain moves on.
func newTenki(a *app) (agentenv.Provider, error) {
	cfg := tenki.Config{}
	var hint string
	if cfg.Token, cfg.CredentialHint = a.credential(tenkiTokenKey, "env:TENKI_AUTH_TOKEN"); cfg.Token == "" {
		// As the SDKs do, TENKI_API_KEY when TENKI_AUTH_TOKEN is unset.
		if cfg.Token, hint = a.credential(tenkiAPIKeyKey, "env:TENKI_API_KEY"); cfg.Token == "" {
			cfg.CredentialHint += " or " + strings.TrimPrefix(hint, "set ")
		} else {
			cfg.CredentialHint = ""
		}
	}
	var err error
	if cfg.APIURL, err = a.cfg.Get(tenkiURLKey); err != nil {
		if a.cfg.Raw(tenkiURLKey) != "env:TENKI_API_ENDPOINT" {
			return nil, err
		}
		cfg.APIURL = "" // the default reference, unset: Tenki's public endpoint
	}
	if cfg.Image, err = a.cfg.Get("provider.tenki.image"); err != nil {
		return nil, err
	}
	if cfg.VMImage, err = a.cfg.Get("provider.tenki.vm_image"); err != nil {
		return nil, err
	}
	if cfg.MaxTimeout, err = a.cfg.Duration("provider.tenki.max_timeout"); err != nil {
		return nil, err
	}
	rate, err := a.cfg.Get("provider.tenki.rate")
	if err == nil {
		cfg.Rate, err = strconv.ParseFloat(rate, 64)
	}
	if err != nil {
		return nil, fmt.Errorf("config: provider.tenki.rate = %q: %w", rate, agentenv.ErrInvalid)
	}
	conc, err := a.cfg.Get("provider.tenki.concurrency")
	if err == nil {
		cfg.Concurrency, err = strconv.Atoi(conc)
	}
	if err != nil {
		return nil, fmt.Errorf("config: provider.tenki.concurrency = %q: %w", conc, agentenv.ErrInvalid)
	}
	return tenki.New(cfg, a.log)
}

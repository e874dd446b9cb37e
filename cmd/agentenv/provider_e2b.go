package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/e2b"
)

// newE2B builds the e2b provider. A key that does not resolve is not an error here: the
// provider then refuses every call, before creating anything, with a message naming what to
// set, so that commands not naming e2b are unaffected.
func newE2B(a *app) (agentenv.Provider, error) {
	cfg := e2b.Config{}
	cfg.APIKey, cfg.CredentialHint = a.credential("provider.e2b.api_key", "env:E2B_API_KEY")
	var err error
	for key, dst := range map[string]*string{"provider.e2b.domain": &cfg.Domain, "provider.e2b.template": &cfg.Template, "provider.e2b.vm_template": &cfg.VMTemplate} {
		if *dst, err = a.cfg.Get(key); err != nil {
			return nil, err
		}
	}
	if cfg.APIURL, err = a.cfg.Get("provider.e2b.api_url"); err != nil {
		return nil, err
	}
	tmpl, err := a.cfg.Get("provider.e2b.sandbox_url")
	if err != nil {
		return nil, err
	}
	if tmpl != "" {
		if !strings.Contains(tmpl, "{port}") || !strings.Contains(tmpl, "{id}") {
			return nil, fmt.Errorf("config: provider.e2b.sandbox_url = %q: want the placeholders {port} and {id}: %w", tmpl, agentenv.ErrInvalid)
		}
		cfg.SandboxURL = func(id string, port int) string {
			return strings.NewReplacer("{id}", id, "{port}", strconv.Itoa(port)).Replace(tmpl)
		}
	}
	if cfg.MaxTimeout, err = a.cfg.Duration("provider.e2b.max_timeout"); err != nil {
		return nil, err
	}
	for key, set := range map[string]func(string) error{
		"provider.e2b.rate":        func(s string) (err error) { cfg.Rate, err = strconv.ParseFloat(s, 64); return err },
		"provider.e2b.concurrency": func(s string) (err error) { cfg.Concurrency, err = strconv.Atoi(s); return err },
	} {
		v, err := a.cfg.Get(key)
		if err != nil {
			return nil, err
		}
		if err := set(v); err != nil {
			return nil, fmt.Errorf("config: %s = %q: %w", key, v, agentenv.ErrInvalid)
		}
	}
	return e2b.New(cfg, a.log)
}

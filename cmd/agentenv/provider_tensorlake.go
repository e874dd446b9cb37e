package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/tensorlake"
)

// newTensorlake builds the tensorlake provider. A key that does not resolve is not an error
// here: the provider then refuses every call, before creating anything, with a message naming
// what to set, so that commands not naming tensorlake are unaffected and a chain moves on.
func newTensorlake(a *app) (agentenv.Provider, error) {
	cfg := tensorlake.Config{}
	cfg.APIKey, cfg.CredentialHint = a.credential("provider.tensorlake.api_key", "env:TENSORLAKE_API_KEY")
	var err error
	for key, dst := range map[string]*string{"provider.tensorlake.api_url": &cfg.APIURL, "provider.tensorlake.image": &cfg.Image, "provider.tensorlake.vm_image": &cfg.VMImage} {
		if *dst, err = a.cfg.Get(key); err != nil {
			return nil, err
		}
	}
	for _, u := range []struct {
		key          string
		placeholders []string
		set          func(tmpl string)
	}{
		{"provider.tensorlake.proxy_url", []string{"{id}"}, func(tmpl string) {
			cfg.ProxyURL = func(id string) string { return strings.ReplaceAll(tmpl, "{id}", id) }
		}},
		{"provider.tensorlake.port_url", []string{"{id}", "{port}"}, func(tmpl string) {
			cfg.PortURL = func(id string, port int) string {
				return strings.NewReplacer("{id}", id, "{port}", strconv.Itoa(port)).Replace(tmpl)
			}
		}},
	} {
		tmpl, err := a.cfg.Get(u.key)
		if err != nil {
			return nil, err
		}
		if tmpl == "" {
			continue
		}
		for _, ph := range u.placeholders {
			if !strings.Contains(tmpl, ph) {
				return nil, fmt.Errorf("config: %s = %q: want the placeholders %s: %w", u.key, tmpl, strings.Join(u.placeholders, " and "), agentenv.ErrInvalid)
			}
		}
		u.set(tmpl)
	}
	if cfg.MaxTimeout, err = a.cfg.Duration("provider.tensorlake.max_timeout"); err != nil {
		return nil, err
	}
	for key, set := range map[string]func(string) error{
		"provider.tensorlake.rate":        func(s string) (err error) { cfg.Rate, err = strconv.ParseFloat(s, 64); return err },
		"provider.tensorlake.concurrency": func(s string) (err error) { cfg.Concurrency, err = strconv.Atoi(s); return err },
	} {
		v, err := a.cfg.Get(key)
		if err != nil {
			return nil, err
		}
		if err := set(v); err != nil {
			return nil, fmt.Errorf("config: %s = %q: %w", key, v, agentenv.ErrInvalid)
		}
	}
	return tensorlake.New(cfg, a.log)
}

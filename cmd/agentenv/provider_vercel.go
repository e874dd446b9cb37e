package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/vercel"
)

// newVercel builds the vercel provider. Credentials that do not resolve are not an error here:
// the provider then refuses every call, before creating anything, with a message naming what to
// set, so that commands not naming vercel are unaffected and a chain moves on. The token is
// provider.vercel.token (with team_id and project_id), else provider.vercel.oidc_token, whose
// claims name the team and project.
func newVercel(a *app) (agentenv.Provider, error) {
	cfg := vercel.Config{}
	var unresolved []string
	optional := func(key string) string {
		v, err := a.cfg.Get(key)
		if err != nil { // a reference that does not resolve: the provider names what to set
			unresolved = append(unresolved, key+" = "+a.cfg.Raw(key))
		}
		return v
	}
	cfg.Token, cfg.TeamID, cfg.ProjectID = optional("provider.vercel.token"), optional("provider.vercel.team_id"), optional("provider.vercel.project_id")
	if cfg.Token == "" {
		cfg.Token = optional("provider.vercel.oidc_token")
	}
	if len(unresolved) > 0 {
		cfg.CredentialHint = vercel.CredentialHint + " (unresolved: " + strings.Join(unresolved, ", ") + ")"
	}
	var err error
	for key, dst := range map[string]*string{"provider.vercel.api_url": &cfg.APIURL, "provider.vercel.image": &cfg.Image, "provider.vercel.vm_image": &cfg.VMImage} {
		if *dst, err = a.cfg.Get(key); err != nil {
			return nil, err
		}
	}
	if cfg.MaxTimeout, err = a.cfg.Duration("provider.vercel.max_timeout"); err != nil {
		return nil, err
	}
	if cfg.MaxTimeout <= 0 {
		return nil, fmt.Errorf("config: provider.vercel.max_timeout = %s: want a positive duration: %w", cfg.MaxTimeout, agentenv.ErrInvalid)
	}
	for key, set := range map[string]func(string) error{
		"provider.vercel.rate":        func(s string) (err error) { cfg.Rate, err = strconv.ParseFloat(s, 64); return err },
		"provider.vercel.concurrency": func(s string) (err error) { cfg.Concurrency, err = strconv.Atoi(s); return err },
	} {
		v, err := a.cfg.Get(key)
		if err != nil {
			return nil, err
		}
		if err := set(v); err != nil {
			return nil, fmt.Errorf("config: %s = %q: %w", key, v, agentenv.ErrInvalid)
		}
	}
	return vercel.New(cfg, a.log)
}

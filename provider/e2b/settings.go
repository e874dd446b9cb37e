package e2b

import "github.com/agentenv/agentenv/internal/setting"

// Settings are the settings of the e2b provider, under provider.e2b.
func Settings() []setting.Key {
	return []setting.Key{
		{Name: "provider.e2b.api_key", Default: "env:E2B_API_KEY", Doc: "E2B API key, a reference (env:NAME or secret:KEY)", Secret: true},
		{Name: "provider.e2b.domain", Default: "e2b.app", Doc: "E2B domain; the API is https://api.DOMAIN, port P of sandbox ID is https://P-ID.DOMAIN"},
		{Name: "provider.e2b.api_url", Doc: "E2B API base URL, for a self-hosted E2B or an emulator (empty: https://api.DOMAIN)"},
		{Name: "provider.e2b.sandbox_url", Doc: "URL of port {port} of sandbox {id}, with those placeholders (empty: https://{port}-{id}.DOMAIN)"},
		{Name: "provider.e2b.template", Default: "base", Doc: "E2B template of a sandbox whose spec names no image"},
		{Name: "provider.e2b.vm_template", Default: "docker", Doc: "Docker-capable E2B template of VM-mode deploys"},
		{Name: "provider.e2b.max_timeout", Default: "24h", Doc: "E2B's maximum sandbox lifetime for the account (1h on Hobby)"},
		{Name: "provider.e2b.rate", Default: "1", Doc: "E2B sandbox creates per second"},
		{Name: "provider.e2b.concurrency", Default: "20", Doc: "E2B sandbox creates in flight"},
	}
}

package tensorlake

import "github.com/agentenv/agentenv/internal/setting"

// Settings are the settings of the tensorlake provider, under provider.tensorlake.
func Settings() []setting.Key {
	return []setting.Key{
		{Name: "provider.tensorlake.api_key", Default: "env:TENSORLAKE_API_KEY", Doc: "Tensorlake API key, a reference (env:NAME or secret:KEY)", Secret: true},
		{Name: "provider.tensorlake.api_url", Default: "https://api.tensorlake.ai", Doc: "Tensorlake API base URL (it serves /sandboxes), for an emulator or another deployment"},
		{Name: "provider.tensorlake.proxy_url", Doc: "URL of sandbox {id}'s own API, with that placeholder (empty: https://{id}.sandbox.tensorlake.ai)"},
		{Name: "provider.tensorlake.port_url", Doc: "URL of port {port} of sandbox {id}, with those placeholders (empty: https://{port}-{id}.sandbox.tensorlake.ai)"},
		{Name: "provider.tensorlake.image", Doc: "Tensorlake sandbox image of a sandbox whose spec names none (empty: Tensorlake's default)"},
		{Name: "provider.tensorlake.vm_image", Doc: "Docker-capable Tensorlake sandbox image (dockerd and the docker CLI) of VM-mode deploys; needed for env deploys"},
		{Name: "provider.tensorlake.max_timeout", Default: "24h", Doc: "longest timeout_secs (an idle timeout) agentenv sends Tensorlake"},
		{Name: "provider.tensorlake.rate", Default: "5", Doc: "Tensorlake sandbox creates per second"},
		{Name: "provider.tensorlake.concurrency", Default: "50", Doc: "Tensorlake sandbox creates in flight"},
	}
}

package tenki

import "github.com/agentenv/agentenv/internal/setting"

// Settings are the settings of the tenki provider, under provider.tenki.
func Settings() []setting.Key {
	return []setting.Key{
		{Name: "provider.tenki.token", Default: "env:TENKI_AUTH_TOKEN", Doc: "Tenki API key (tk_...), a reference (env:NAME or secret:KEY); when it resolves to nothing, provider.tenki.api_key", Secret: true},
		{Name: "provider.tenki.api_key", Default: "env:TENKI_API_KEY", Doc: "Tenki API key read when provider.tenki.token resolves to nothing, as Tenki's SDKs fall back to TENKI_API_KEY", Secret: true},
		{Name: "provider.tenki.api_url", Default: "env:TENKI_API_ENDPOINT", Doc: "Tenki API endpoint (Connect); when the default reference resolves to nothing, https://api.tenki.cloud"},
		{Name: "provider.tenki.image", Doc: "Tenki registry image of a sandbox whose spec names none (empty: Tenki's default image)"},
		{Name: "provider.tenki.vm_image", Doc: "Tenki registry image of VM-mode deploys, with dockerd and the docker CLI (empty: Tenki's default image; agentenv starts dockerd unless it runs)"},
		{Name: "provider.tenki.max_timeout", Default: "24h", Doc: "longest max_duration agentenv sends Tenki (a session's hard lifetime)"},
		{Name: "provider.tenki.rate", Default: "5", Doc: "Tenki session creates per second"},
		{Name: "provider.tenki.concurrency", Default: "50", Doc: "Tenki session creates in flight"},
	}
}

package vercel

import "github.com/agentenv/agentenv/internal/setting"

// Settings are the settings of the vercel provider, under provider.vercel.
func Settings() []setting.Key {
	return []setting.Key{
		{Name: "provider.vercel.token", Default: "env:VERCEL_TOKEN", Doc: "Vercel access token, a reference (env:NAME or secret:KEY); with team_id and project_id", Secret: true},
		{Name: "provider.vercel.oidc_token", Default: "env:VERCEL_OIDC_TOKEN", Doc: "Vercel OIDC token, used when token is unset; its claims name the team and project", Secret: true},
		{Name: "provider.vercel.team_id", Default: "env:VERCEL_TEAM_ID", Doc: "Vercel team the sandboxes belong to (with token)"},
		{Name: "provider.vercel.project_id", Default: "env:VERCEL_PROJECT_ID", Doc: "Vercel project the sandboxes belong to (with token)"},
		{Name: "provider.vercel.api_url", Default: "https://vercel.com/api", Doc: "Vercel API base URL (it serves /v2/sandboxes), for an emulator"},
		{Name: "provider.vercel.image", Doc: "Vercel Sandbox image of a sandbox whose spec names none (empty: Vercel's default, universal)"},
		{Name: "provider.vercel.vm_image", Doc: "Docker-capable Vercel Sandbox image (dockerd and the docker CLI) of VM-mode deploys; needed for env deploys"},
		{Name: "provider.vercel.max_timeout", Default: "5h", Doc: "longest sandbox timeout agentenv sends Vercel: the plan's limit (5h on Pro and Enterprise, 45m on Hobby)"},
		{Name: "provider.vercel.rate", Default: "5", Doc: "Vercel sandbox creates per second"},
		{Name: "provider.vercel.concurrency", Default: "50", Doc: "Vercel sandbox creates in flight"},
	}
}

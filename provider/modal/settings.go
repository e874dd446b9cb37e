package modal

import "github.com/agentenv/agentenv/internal/setting"

// Settings are the settings of the modal provider, under provider.modal.
func Settings() []setting.Key {
	return []setting.Key{
		{Name: "provider.modal.token_id", Default: "env:MODAL_TOKEN_ID", Doc: "Modal token id, a reference (env:NAME or secret:KEY)", Secret: true},
		{Name: "provider.modal.token_secret", Default: "env:MODAL_TOKEN_SECRET", Doc: "Modal token secret, a reference (env:NAME or secret:KEY)", Secret: true},
		{Name: "provider.modal.app", Default: "agentenv", Doc: "Modal app the sandboxes belong to"},
		{Name: "provider.modal.regions", Doc: "comma list of Modal regions (empty: Modal chooses)"},
		{Name: "provider.modal.region", Doc: "the Modal region container-mode deploys pin their sandboxes to (i6pn is per region); needed for container mode"},
		{Name: "provider.modal.rate", Default: "5", Doc: "Modal sandbox creates per second"},
		{Name: "provider.modal.concurrency", Default: "50", Doc: "Modal sandbox creates in flight"},
	}
}

// VMSettings are the settings of the modal_vm provider (VM mode), under provider.modal_vm.
func VMSettings() []setting.Key {
	return []setting.Key{
		{Name: "provider.modal_vm.token_id", Default: "env:MODAL_TOKEN_ID", Doc: "Modal token id of the modal_vm provider (VM mode), a reference (env:NAME or secret:KEY)", Secret: true},
		{Name: "provider.modal_vm.token_secret", Default: "env:MODAL_TOKEN_SECRET", Doc: "Modal token secret of the modal_vm provider, a reference (env:NAME or secret:KEY)", Secret: true},
		{Name: "provider.modal_vm.image", Default: "docker:dind", Doc: "registry image of modal_vm's VMs: it must hold dockerd and the docker CLI (agentenv starts dockerd unless the image does)"},
		{Name: "provider.modal_vm.app", Default: "agentenv", Doc: "Modal app modal_vm's VMs belong to (tagged apart from modal's sandboxes)"},
		{Name: "provider.modal_vm.regions", Doc: "comma list of Modal regions modal_vm's VMs may run in (empty: Modal chooses)"},
		{Name: "provider.modal_vm.region", Doc: "one Modal region modal_vm's VMs are pinned to (optional; wins over regions)"},
		{Name: "provider.modal_vm.rate", Default: "5", Doc: "modal_vm VM creates per second"},
		{Name: "provider.modal_vm.concurrency", Default: "50", Doc: "modal_vm VM creates in flight"},
	}
}

package smolvm

import "github.com/agentenv/agentenv/internal/setting"

// Settings are the settings of the smol_vm provider, under provider.smol_vm.
func Settings() []setting.Key {
	return []setting.Key{
		{Name: "provider.smol_vm.url", Doc: "smolvm server (`smolvm serve start`): unix:///path/to/smolvm.sock or http://host:port (empty: where smolvm serve listens by default, unix://$XDG_RUNTIME_DIR/smolvm.sock, else unix:///tmp/smolvm.sock)"},
		{Name: "provider.smol_vm.image", Doc: "image of a bare smol_vm sandbox whose spec names none (an OCI reference smolvm pulls)"},
		{Name: "provider.smol_vm.slots", Default: "8", Doc: "ports published per smol_vm VM (smolvm publishes ports at create only), so the most ports one VM-mode deploy can use"},
		{Name: "provider.smol_vm.vm_cpus", Default: "2", Doc: "vCPUs of a smol_vm VM whose spec sets none"},
		{Name: "provider.smol_vm.vm_memory_mb", Default: "4096", Doc: "memory of a smol_vm VM whose spec sets none, MiB"},
		{Name: "provider.smol_vm.vm_storage_gb", Default: "20", Doc: "a smol_vm VM's /storage disk, where its Docker engine keeps its images, GiB"},
	}
}

package smolvm_test

import (
	"fmt"
	"testing"

	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/smolvm"
)

// TestDocumentedDefaults ties every default the docs state (README.md, the Go docs of Config, the config keys `agentenv config` lists) to the constant New fills a
// zero Config with.
func TestDocumentedDefaults(t *testing.T) {
	short, spaced := providertest.Short, providertest.Spaced
	providertest.Documented(t, "README.md",
		"so Create waits (bounded, "+spaced(smolvm.DefaultAgentWait)+")",
		fmt.Sprintf("`provider.smol_vm.slots` (%d) guest ports from %d", smolvm.DefaultSlots, smolvm.DefaultSlotBase),
		fmt.Sprintf("%d vCPUs, %d GiB and a %d GiB `/storage` disk", smolvm.DefaultVMCPUs, smolvm.DefaultVMMemoryMB/1024, smolvm.DefaultVMStorageGB),
		"(`docker info`, "+spaced(smolvm.DefaultDockerWait)+")")
	providertest.Documented(t, "smolvm.go",
		`Name string // provider name as configured; default "`+smolvm.DefaultName+`"`,
		fmt.Sprintf("as smolvm publishes ports); default %d", smolvm.DefaultSlots),
		fmt.Sprintf("guest port of a VM's first slot; default %d", smolvm.DefaultSlotBase),
		fmt.Sprintf("vCPUs of a VM whose spec sets none; default %d", smolvm.DefaultVMCPUs),
		fmt.Sprintf("memory of a VM whose spec sets none, MiB; default %d", smolvm.DefaultVMMemoryMB),
		fmt.Sprintf("where its Docker engine keeps its data; default %d", smolvm.DefaultVMStorageGB),
		"bound on a create, its start and its setup; default "+short(smolvm.DefaultCreateTimeout),
		"bound on cleanup requests; default "+short(smolvm.DefaultRequestTimeout),
		"bound on a VM's Docker engine start; default "+short(smolvm.DefaultDockerWait),
		"to run commands; default "+short(smolvm.DefaultAgentWait))
	keys := map[string]string{
		"provider.smol_vm.slots":         fmt.Sprint(smolvm.DefaultSlots),
		"provider.smol_vm.vm_cpus":       fmt.Sprint(smolvm.DefaultVMCPUs),
		"provider.smol_vm.vm_memory_mb":  fmt.Sprint(smolvm.DefaultVMMemoryMB),
		"provider.smol_vm.vm_storage_gb": fmt.Sprint(smolvm.DefaultVMStorageGB),
	}
	providertest.KeyDefaults(t, config.Defaults(), keys)
}

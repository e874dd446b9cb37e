package main

import (
	"fmt"
	"strconv"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/smolvm"
)

// newSmolVM builds the smol_vm provider. It needs no credential (smolvm's local API has none);
// a server that does not answer fails each call with a message naming provider.smol_vm.url,
// before anything is made, so that commands not naming smol_vm are unaffected and a chain moves
// on.
func newSmolVM(a *app) (agentenv.Provider, error) {
	cfg := smolvm.Config{}
	var err error
	for key, dst := range map[string]*string{"provider.smol_vm.url": &cfg.URL, "provider.smol_vm.image": &cfg.Image} {
		if *dst, err = a.cfg.Get(key); err != nil {
			return nil, err
		}
	}
	for key, dst := range map[string]*int{
		"provider.smol_vm.slots": &cfg.Slots, "provider.smol_vm.vm_cpus": &cfg.VMCPUs,
		"provider.smol_vm.vm_memory_mb": &cfg.VMMemoryMB, "provider.smol_vm.vm_storage_gb": &cfg.VMStorageGB,
	} {
		v, err := a.cfg.Get(key)
		if err != nil {
			return nil, err
		}
		if v == "" {
			continue
		}
		if *dst, err = strconv.Atoi(v); err != nil || *dst <= 0 {
			return nil, fmt.Errorf("config: %s = %q: want a positive whole number: %w", key, v, agentenv.ErrInvalid)
		}
	}
	p, err := smolvm.New(cfg, a.log)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return p, nil
}

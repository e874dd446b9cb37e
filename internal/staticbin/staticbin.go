// Package staticbin tells whether an executable runs in an image without a libc: the agentenv
// binary copied into images as the runtime, and into stdio servers as their bridge.
package staticbin

import (
	"debug/elf"
	"fmt"
)

// Check returns nil if path is an ELF executable without a program interpreter (no PT_INTERP
// header), that is one that runs in an image without a libc.
func Check(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("check static %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}

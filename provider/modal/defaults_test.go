package modal_test

import (
	"fmt"
	"testing"

	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/provider/modal"
	"github.com/agentenv/agentenv/provider/providertest"
)

// TestDocumentedDefaults ties every default the docs state (README.md, the Go docs of the package and of Config, the config keys `agentenv config` lists) to the constant New fills a
// zero Config with.
func TestDocumentedDefaults(t *testing.T) {
	short, spaced := providertest.Short, providertest.Spaced
	providertest.Documented(t, "README.md",
		"else time to expiry + "+spaced(modal.DefaultMargin)+", else "+spaced(modal.DefaultTimeout)+"; ≤ "+spaced(modal.MaxTimeout)+")",
		fmt.Sprintf("`provider.modal.rate` (creates/s, default %g), `provider.modal.concurrency` (default %d)", modal.DefaultRate, modal.DefaultConcurrency),
		"image `provider.modal_vm.image` (default `"+modal.DefaultVMImage+"`")
	providertest.Documented(t, "modal.go",
		"never \"none\", at most "+spaced(modal.MaxTimeout)+".",
		`Name string // provider name as configured; default "`+modal.DefaultName+`"`,
		`the sandboxes belong to; default "`+modal.DefaultApp+`"`,
		"neither Timeout nor Expires; default "+short(modal.DefaultTimeout),
		"added to a spec's time to expiry; default "+short(modal.DefaultMargin),
		fmt.Sprintf("creates per second; default %g", modal.DefaultRate),
		fmt.Sprintf("creates in flight; default %d", modal.DefaultConcurrency),
		"bound on one create request; default "+short(modal.DefaultCreateTimeout),
		fmt.Sprintf("a new sandbox's tunnels; default %gs", modal.DefaultTunnelWait.Seconds()),
		fmt.Sprintf("are published on them; default %d.", modal.DefaultSlots),
		fmt.Sprintf("the service DB role go there; default %d.", modal.DefaultTCPSlots),
		fmt.Sprintf("first slot port of a VM; default %d", modal.DefaultSlotBase),
		"bound on a VM's Docker engine start; default "+short(modal.DefaultDockerWait),
		"bound on one image upload into a VM; default "+short(modal.DefaultLoadTimeout))
	keys := map[string]string{
		"provider.modal.app":            modal.DefaultApp,
		"provider.modal.rate":           fmt.Sprint(modal.DefaultRate),
		"provider.modal.concurrency":    fmt.Sprint(modal.DefaultConcurrency),
		"provider.modal_vm.app":         modal.DefaultApp,
		"provider.modal_vm.image":       modal.DefaultVMImage,
		"provider.modal_vm.rate":        fmt.Sprint(modal.DefaultRate),
		"provider.modal_vm.concurrency": fmt.Sprint(modal.DefaultConcurrency),
	}
	providertest.KeyDefaults(t, config.Defaults(), keys)
}

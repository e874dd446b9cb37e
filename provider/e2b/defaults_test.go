package e2b_test

import (
	"fmt"
	"testing"

	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/provider/e2b"
	"github.com/agentenv/agentenv/provider/providertest"
)

// TestDocumentedDefaults ties every default the docs state (README.md, the package's Go docs, the config keys `agentenv config` lists) to the constant New fills a
// zero Config with.
func TestDocumentedDefaults(t *testing.T) {
	short, spaced := providertest.Short, providertest.Spaced
	providertest.Documented(t, "README.md",
		"else time to expiry + "+spaced(e2b.DefaultMargin)+", else "+spaced(e2b.DefaultTimeout)+";",
		"at most `provider.e2b.max_timeout`, default "+spaced(e2b.DefaultMaxTimeout)+";",
		fmt.Sprintf("`provider.e2b.rate` (creates/s, default %g)", e2b.DefaultRate),
		fmt.Sprintf("`provider.e2b.concurrency` (default %d)", e2b.DefaultConcurrency),
		"`provider.e2b.vm_template` (default `"+e2b.DefaultVMTemplate+"`",
		"`provider.e2b.api_key`, a reference only (default `env:E2B_API_KEY`)")
	providertest.Documented(t, "e2b.go",
		fmt.Sprintf("%g create per second, %d concurrent", e2b.DefaultRate, e2b.DefaultConcurrency),
		`Name string // provider name as configured; default "`+e2b.DefaultName+`"`,
		`default "`+e2b.DefaultDomain+`"; the API is https://api.<Domain>`,
		`default "`+e2b.DefaultTemplate+`"`, `default "`+e2b.DefaultVMTemplate+`"`)
	keys := map[string]string{
		"provider.e2b.api_key":     "env:E2B_API_KEY",
		"provider.e2b.domain":      e2b.DefaultDomain,
		"provider.e2b.template":    e2b.DefaultTemplate,
		"provider.e2b.vm_template": e2b.DefaultVMTemplate,
		"provider.e2b.max_timeout": short(e2b.DefaultMaxTimeout),
		"provider.e2b.rate":        fmt.Sprint(e2b.DefaultRate),
		"provider.e2b.concurrency": fmt.Sprint(e2b.DefaultConcurrency),
	}
	providertest.KeyDefaults(t, config.Defaults(), keys)
}

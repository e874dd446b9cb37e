package tensorlake_test

import (
	"fmt"
	"testing"

	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/tensorlake"
)

// TestDocumentedDefaults ties every default the docs state (README.md, the config keys `agentenv config` lists) to the constant New fills a
// zero Config with.
func TestDocumentedDefaults(t *testing.T) {
	short, spaced := providertest.Short, providertest.Spaced
	providertest.Documented(t, "README.md",
		"on a detached context bounded by "+spaced(tensorlake.DefaultCreateTimeout)+";",
		"else time to expiry + "+spaced(tensorlake.DefaultMargin)+", else "+spaced(tensorlake.DefaultTimeout)+";",
		"at most `provider.tensorlake.max_timeout`, default "+spaced(tensorlake.DefaultMaxTimeout)+")",
		fmt.Sprintf("`rate` (%g/s), `concurrency` (%d)", tensorlake.DefaultRate, tensorlake.DefaultConcurrency),
		"`provider.tensorlake.api_key` (default `env:TENSORLAKE_API_KEY`)")
	providertest.Documented(t, "tensorlake.go",
		`Name string // provider name as configured; default "`+tensorlake.DefaultName+`"`,
		"management API base; default "+tensorlake.DefaultAPIURL+" (it serves /sandboxes)",
		"default https://ID."+tensorlake.DefaultDomain, "default https://P-ID."+tensorlake.DefaultDomain)
	keys := map[string]string{
		"provider.tensorlake.api_key":     "env:TENSORLAKE_API_KEY",
		"provider.tensorlake.api_url":     tensorlake.DefaultAPIURL,
		"provider.tensorlake.max_timeout": short(tensorlake.DefaultMaxTimeout),
		"provider.tensorlake.rate":        fmt.Sprint(tensorlake.DefaultRate),
		"provider.tensorlake.concurrency": fmt.Sprint(tensorlake.DefaultConcurrency),
	}
	providertest.KeyDefaults(t, config.Defaults(), keys)
}

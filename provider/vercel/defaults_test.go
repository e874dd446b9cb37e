package vercel_test

import (
	"fmt"
	"testing"

	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/vercel"
)

// TestDocumentedDefaults ties every default the docs state (README.md, the package's Go docs, the config keys `agentenv config` lists) to the constant New fills a
// zero Config with.
func TestDocumentedDefaults(t *testing.T) {
	short, spaced := providertest.Short, providertest.Spaced
	providertest.Documented(t, "README.md",
		"on a detached context bounded by "+spaced(vercel.DefaultCreateTimeout)+";",
		"else the time to expiry + "+spaced(vercel.DefaultMargin)+", else "+spaced(vercel.DefaultTimeout)+";",
		"at most `provider.vercel.max_timeout` (default "+spaced(vercel.DefaultMaxTimeout)+":",
		fmt.Sprintf("`rate` (%g/s), `concurrency` (%d)", vercel.DefaultRate, vercel.DefaultConcurrency),
		"`provider.vercel.token` (default `env:VERCEL_TOKEN`)")
	providertest.Documented(t, "vercel.go",
		fmt.Sprintf("the plan's limit (%g hours on Pro,", vercel.DefaultMaxTimeout.Hours()),
		`Name string // provider name as configured; default "`+vercel.DefaultName+`"`,
		"API base; default "+vercel.DefaultAPIURL+" (it serves /v2/sandboxes)")
	keys := map[string]string{
		"provider.vercel.token":       "env:VERCEL_TOKEN",
		"provider.vercel.api_url":     vercel.DefaultAPIURL,
		"provider.vercel.max_timeout": short(vercel.DefaultMaxTimeout),
		"provider.vercel.rate":        fmt.Sprint(vercel.DefaultRate),
		"provider.vercel.concurrency": fmt.Sprint(vercel.DefaultConcurrency),
	}
	providertest.KeyDefaults(t, config.Defaults(), keys)
}

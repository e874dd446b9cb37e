package tenki_test

import (
	"fmt"
	"testing"

	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/tenki"
)

// TestDocumentedDefaults ties every default the docs state (README.md, the config keys `agentenv config` lists) to the constant New fills a
// zero Config with.
func TestDocumentedDefaults(t *testing.T) {
	short, spaced := providertest.Short, providertest.Spaced
	providertest.Documented(t, "README.md",
		"on a detached context bounded by "+spaced(tenki.DefaultCreateTimeout)+";",
		"else time to expiry + "+spaced(tenki.DefaultMargin)+", else "+spaced(tenki.DefaultTimeout)+";",
		"at most `provider.tenki.max_timeout`, default "+spaced(tenki.DefaultMaxTimeout)+")",
		"unless it answers, waited for "+spaced(tenki.DefaultDockerWait)+";",
		fmt.Sprintf("`rate` (%g/s), `concurrency` (%d)", tenki.DefaultRate, tenki.DefaultConcurrency),
		"(default `env:TENKI_API_ENDPOINT`, else `"+tenki.DefaultAPIURL+"`)")
	providertest.Documented(t, "tenki.go",
		`Name string // provider name as configured; default "`+tenki.DefaultName+`"`,
		"control plane endpoint; default "+tenki.DefaultAPIURL)
	keys := map[string]string{
		"provider.tenki.token":       "env:TENKI_AUTH_TOKEN",
		"provider.tenki.api_key":     "env:TENKI_API_KEY",
		"provider.tenki.api_url":     "env:TENKI_API_ENDPOINT",
		"provider.tenki.max_timeout": short(tenki.DefaultMaxTimeout),
		"provider.tenki.rate":        fmt.Sprint(tenki.DefaultRate),
		"provider.tenki.concurrency": fmt.Sprint(tenki.DefaultConcurrency),
	}
	providertest.KeyDefaults(t, config.Defaults(), keys)
}

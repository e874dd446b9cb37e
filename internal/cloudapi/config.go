package cloudapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentenv/agentenv"
)

// Config is the part of a cloud provider's configuration that every cloud over a [Client]
// shares: what to set when the credential is missing, the [Backstop] lifetime, the [Gate]'s
// rate and creates in flight, the bounds on its requests and its HTTP client. A provider embeds
// it in its own Config, and New fills it with [Config.Defaults] from the provider's defaults.
type Config struct {
	// CredentialHint says what to set when the credential is missing, for the error.
	CredentialHint string
	Timeout        time.Duration // backstop when a spec has neither Timeout nor Expires
	Margin         time.Duration // added to a spec's time to expiry
	MaxTimeout     time.Duration // longest lifetime sent: the cloud's (or the plan's) limit
	Rate           float64       // creates per second
	Concurrency    int           // creates in flight
	CreateTimeout  time.Duration // bound on a create (and its wait until the sandbox runs)
	RequestTimeout time.Duration // bound on any other request, cleanup included
	// HTTPClient carries the requests, which are bounded by their context, not by the client.
	HTTPClient *http.Client
}

// Defaults fills c's zero fields from def, the provider's defaults, by the rule of [Default]:
// zero means the default, a negative number is ErrInvalid naming its field (every such field,
// joined).
func (c *Config) Defaults(def Config) error {
	if c.CredentialHint == "" {
		c.CredentialHint = def.CredentialHint
	}
	if c.HTTPClient == nil {
		c.HTTPClient = def.HTTPClient
	}
	return errors.Join(
		Default("Timeout", &c.Timeout, def.Timeout),
		Default("Margin", &c.Margin, def.Margin),
		Default("MaxTimeout", &c.MaxTimeout, def.MaxTimeout),
		Default("Rate", &c.Rate, def.Rate),
		Default("Concurrency", &c.Concurrency, def.Concurrency),
		Default("CreateTimeout", &c.CreateTimeout, def.CreateTimeout),
		Default("RequestTimeout", &c.RequestTimeout, def.RequestTimeout),
	)
}

// Number is what [Default] fills: counts, rates and durations.
type Number interface{ ~int | ~int64 | ~float64 }

// Default is the one rule for a number in a provider's Config: zero means def, and a negative
// number is ErrInvalid naming field (a negative count, rate or bound is a mistake, never a
// request for the default).
func Default[T Number](field string, v *T, def T) error {
	if *v < 0 {
		return fmt.Errorf("%s %v: want 0 (the default, %v) or more: %w", field, *v, def, agentenv.ErrInvalid)
	}
	if *v == 0 {
		*v = def
	}
	return nil
}

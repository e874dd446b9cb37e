package cloudapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
)

func TestDefaultsFillZeroKeepSetRejectNegative(t *testing.T) {
	hc := &http.Client{}
	def := Config{CredentialHint: "set acme.key", Timeout: time.Hour, Margin: time.Minute, MaxTimeout: 2 * time.Hour,
		Rate: 5, Concurrency: 50, CreateTimeout: 3 * time.Minute, RequestTimeout: 30 * time.Second, HTTPClient: hc}
	var c Config
	if err := c.Defaults(def); err != nil || c != def {
		t.Errorf("Defaults of a zero Config = %+v, %v; want the defaults", c, err)
	}
	mine := &http.Client{}
	set := Config{CredentialHint: "mine", Timeout: 1, Margin: 2, MaxTimeout: 3, Rate: 0.5, Concurrency: 1, CreateTimeout: 4, RequestTimeout: 5, HTTPClient: mine}
	c = set
	if err := c.Defaults(def); err != nil || c != set {
		t.Errorf("Defaults of a set Config = %+v, %v; want it unchanged", c, err)
	}
	c = Config{Rate: -1, MaxTimeout: -time.Hour}
	err := c.Defaults(def)
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "Rate -1") || !strings.Contains(err.Error(), "MaxTimeout -1h0m0s") {
		t.Errorf("Defaults with a negative rate and max timeout = %v, want ErrInvalid naming both", err)
	}
}

func TestDefaultIsOneRuleForEveryKind(t *testing.T) {
	n, f, d := 0, 0.0, time.Duration(0)
	if Default("N", &n, 8) != nil || Default("F", &f, 1.5) != nil || Default("D", &d, time.Minute) != nil || n != 8 || f != 1.5 || d != time.Minute {
		t.Errorf("zeros became %d, %g, %s; want the defaults", n, f, d)
	}
	n = -2
	if err := Default("Slots", &n, 8); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "Slots -2") || n != -2 {
		t.Errorf("Default of -2 = %v (value %d), want ErrInvalid naming Slots, the value untouched", err, n)
	}
}

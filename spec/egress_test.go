package spec

import (
	"testing"

	"github.com/agentenv/agentenv"
)

func TestParseEgress(t *testing.T) {
	for in, want := range map[string]agentenv.EgressRule{
		"10.0.0.0/8":           {CIDR: "10.0.0.0/8"},
		"203.0.113.5/32:443":   {CIDR: "203.0.113.5/32", Port: 443},
		"2001:db8::/32":        {CIDR: "2001:db8::/32"},
		"[2001:db8::/32]:5432": {CIDR: "2001:db8::/32", Port: 5432},
		"0.0.0.0/0:443":        {CIDR: "0.0.0.0/0", Port: 443},
	} {
		got, err := parseEgress(in)
		if err != nil || got != want {
			t.Errorf("parseEgress(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "example.com", "example.com:443", "10.0.0.1", "[2001:db8::/32]", "10.0.0.0/8:0", "10.0.0.0/8:x"} {
		if got, err := parseEgress(in); err == nil {
			t.Errorf("parseEgress(%q) = %+v, want an error", in, got)
		}
	}
}

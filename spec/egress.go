package spec

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
)

// parseEgress reads one egress entry: an IP prefix (203.0.113.0/24, 2001:db8::/32), optionally
// with one TCP port (203.0.113.5/32:443, [2001:db8::/32]:443). A host name is refused: a
// network policy matches addresses, and an address a name resolves to today is not the one it
// resolves to tomorrow.
func parseEgress(s string) (agentenv.EgressRule, error) {
	prefix, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]:")
		if end < 0 {
			return agentenv.EgressRule{}, fmt.Errorf("invalid egress %q: want [IPv6-PREFIX]:PORT", s)
		}
		prefix, port = s[1:end], s[end+2:]
	default:
		if _, err := netip.ParsePrefix(s); err != nil {
			if i := strings.LastIndexByte(s, ':'); i > 0 && !strings.Contains(s[:i], ":") {
				prefix, port = s[:i], s[i+1:]
			}
		}
	}
	p, err := netip.ParsePrefix(prefix)
	if err != nil {
		if a, aerr := netip.ParseAddr(prefix); aerr == nil {
			return agentenv.EgressRule{}, fmt.Errorf("invalid egress %q: want a prefix such as %s", s, netip.PrefixFrom(a, a.BitLen()))
		}
		return agentenv.EgressRule{}, fmt.Errorf("invalid egress %q: want an IP prefix (CIDR) with an optional :PORT; a host name cannot be enforced by an address policy, give its addresses", s)
	}
	if p != p.Masked() {
		return agentenv.EgressRule{}, fmt.Errorf("invalid egress %q: the prefix has host bits set; want %s", s, p.Masked())
	}
	r := agentenv.EgressRule{CIDR: p.String()}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return agentenv.EgressRule{}, fmt.Errorf("invalid egress %q: port %q out of range 1-65535", s, port)
		}
		r.Port = n
	}
	return r, nil
}

// EgressRules returns the env's egress list as the rules a provider enforces. Load has
// checked every entry, so an entry that does not parse is left out.
func (e *Env) EgressRules() []agentenv.EgressRule {
	var out []agentenv.EgressRule
	for _, s := range e.Egress {
		if r, err := parseEgress(s); err == nil {
			out = append(out, r)
		}
	}
	return out
}

package egressproxy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Allowlist is the set of hosts the proxy lets through: exact names, "*.suffix" wildcards that
// match the suffix's subdomains only (never the suffix itself), and IP addresses or prefixes,
// which alone let an IP literal through. Names compare case-insensitively, a trailing dot
// ignored. The zero Allowlist allows nothing; AnyHost allows every host.
type Allowlist struct {
	any      bool // every host: a "public" phase behind the proxy
	names    map[string]bool
	suffixes []string // ".example.org" for "*.example.org"
	prefixes []netip.Prefix
}

// ParseAllowlist reads entries as task.toml's allowed_hosts gives them: "example.org",
// "*.pypi.org", "192.0.2.7", "192.0.2.0/24". An empty entry, a URL, a port, or a wildcard
// anywhere but the first label is an error naming the entry.
func ParseAllowlist(entries []string) (Allowlist, error) {
	a := Allowlist{names: map[string]bool{}}
	for i, e := range entries {
		if err := a.add(e); err != nil {
			return Allowlist{}, fmt.Errorf("allow[%d]: %w", i, err)
		}
	}
	return a, nil
}

// AnyHost is the Allowlist that lets every host through: a task's "public" phase, when another
// phase of it needs the proxy.
func AnyHost() Allowlist { return Allowlist{any: true} }

// CheckHost reports whether entry is one ParseAllowlist reads: an error saying what is wrong
// with it, quoting it, or nil.
func CheckHost(entry string) error {
	return (&Allowlist{names: map[string]bool{}}).add(entry)
}

// add adds one entry to a.
func (a *Allowlist) add(e string) error {
	h := normal(e)
	switch {
	case h == "":
		return fmt.Errorf("%q: empty host", e)
	case strings.Contains(h, "/"):
		p, err := netip.ParsePrefix(h)
		if err != nil {
			return fmt.Errorf("%q: want a host name, address or CIDR prefix", e)
		}
		a.prefixes = append(a.prefixes, p.Masked())
	case isAddr(h):
		ip, _ := netip.ParseAddr(strings.Trim(h, "[]"))
		a.prefixes = append(a.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
	case strings.HasPrefix(h, "*."):
		rest := h[1:] // ".example.org"
		if !validName(rest[1:]) {
			return fmt.Errorf("%q: want *.NAME with NAME a host name", e)
		}
		a.suffixes = append(a.suffixes, rest)
	case validName(h):
		a.names[h] = true
	default:
		return fmt.Errorf("%q: want a host name (letters, digits, '-', '.'), *.NAME, an address or a CIDR prefix", e)
	}
	return nil
}

// Allows reports whether host (a name or an IP literal, without its port) may be reached, and
// why in a few words.
func (a Allowlist) Allows(host string) (bool, string) {
	h := normal(host)
	if h == "" {
		return false, "no host"
	}
	if a.any {
		return true, "any host in this phase"
	}
	if isAddr(h) {
		ip, _ := netip.ParseAddr(strings.Trim(h, "[]"))
		ip = ip.Unmap()
		for _, p := range a.prefixes {
			if p.Contains(ip) {
				return true, "address listed as " + p.String()
			}
		}
		return false, "an IP address is allowed only when listed"
	}
	if !validName(h) {
		return false, "not a host name"
	}
	if a.names[h] {
		return true, "listed"
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(h, s) {
			return true, "matches *" + s
		}
	}
	return false, "not in the allowlist"
}

// normal is a host as the list compares it: lower case, no surrounding space, no trailing dot.
func normal(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}

// isAddr reports whether h is an IP literal (an IPv6 one may be in brackets, may carry a zone).
func isAddr(h string) bool {
	_, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return err == nil
}

// validName reports whether h is a host name: dot-separated labels of letters, digits, '-'
// and '_', none empty or longer than 63, 253 at most in all.
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

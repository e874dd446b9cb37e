package gateway

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"unicode"
)

// Bounds on role gating input.
const (
	maxRoleLen    = 128
	maxPatternLen = 256
	maxPatterns   = 1024
	maxRoles      = 256 // distinct roles with their own MCP server
)

// Rule is one gating rule of a role: the last rule whose pattern matches a tool decides
// whether it is disabled.
type Rule struct {
	Pattern  string `json:"pattern"`
	Disabled bool   `json:"disabled"`
}

// roles holds the gating rules of every role. Safe for concurrent use.
type roles struct {
	mu      sync.RWMutex
	rules   map[string][]Rule
	version uint64 // counts changes, so that answers computed from the rules can be cached
}

func newRoles(disabled map[string][]string) *roles {
	r := &roles{rules: make(map[string][]Rule)}
	for role, pats := range disabled {
		r.set(normRole(role), pats, true)
	}
	return r
}

// normRole maps the empty role to DefaultRole.
func normRole(role string) string {
	if role == "" {
		return DefaultRole
	}
	return role
}

// validRole checks a role name: 1-128 printable characters without spaces.
func validRole(role string) error {
	if len(role) > maxRoleLen {
		return fmt.Errorf("role longer than %d bytes", maxRoleLen)
	}
	for _, c := range role {
		if !unicode.IsPrint(c) || unicode.IsSpace(c) {
			return fmt.Errorf("role %q: invalid character %q", role, c)
		}
	}
	return nil
}

func validPatterns(pats []string) error {
	if len(pats) > maxPatterns {
		return fmt.Errorf("more than %d patterns", maxPatterns)
	}
	for _, p := range pats {
		if p == "" {
			return errors.New("empty pattern")
		}
		if len(p) > maxPatternLen {
			return fmt.Errorf("pattern longer than %d bytes", maxPatternLen)
		}
	}
	return nil
}

// set disables (or enables) the tools matching pats for role. A pattern replaces any earlier
// rule with the same pattern; an enable rule is kept only while some disable rule remains
// for it to override.
func (r *roles) set(role string, pats []string, disable bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.version++
	rules := r.rules[role]
	for _, p := range pats {
		rules = slices.DeleteFunc(rules, func(x Rule) bool { return x.Pattern == p })
		if disable || slices.ContainsFunc(rules, func(x Rule) bool { return x.Disabled }) {
			rules = append(rules, Rule{Pattern: p, Disabled: disable})
		}
	}
	if !slices.ContainsFunc(rules, func(x Rule) bool { return x.Disabled }) {
		rules = nil
	}
	if len(rules) == 0 {
		delete(r.rules, role)
		return
	}
	r.rules[role] = rules
}

// disabled reports whether role may not use the tool known by any of names.
func (r *roles) disabled(role string, names ...string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rules := r.rules[role]
	for i := len(rules) - 1; i >= 0; i-- {
		for _, n := range names {
			if match(rules[i].Pattern, n) {
				return rules[i].Disabled
			}
		}
	}
	return false
}

// changes returns the count of rule changes so far.
func (r *roles) changes() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.version
}

// snapshot returns a copy of every role's rules.
func (r *roles) snapshot() map[string][]Rule {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string][]Rule, len(r.rules))
	for k, v := range maps.All(r.rules) {
		out[k] = slices.Clone(v)
	}
	return out
}

// match reports whether name matches pattern, where '*' matches any run of bytes. It runs in
// O(len(pattern)*len(name)) at worst.
func match(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

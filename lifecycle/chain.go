package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentenv/agentenv"
)

// ParseChain splits a provider setting such as "docker" or "modal,docker" into member names.
// Every member must be configured in m.
func (m *Manager) ParseChain(s string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			return nil, fmt.Errorf("provider %q: empty member: %w", s, agentenv.ErrInvalid)
		}
		if _, err := m.backend(n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no provider given: %w", agentenv.ErrInvalid)
	}
	return names, nil
}

// CreateChain tries req on each member in order. Each attempt is its own record, so a member
// that fails has reclaimed what it made (Create does that) before the next member starts; the
// winner's record names it as the provider. A cancellation stops the chain at once.
func (m *Manager) CreateChain(ctx context.Context, members []string, req CreateRequest) (agentenv.Record, agentenv.Sandbox, error) {
	var errs []error
	base := req.ID
	for i, name := range members {
		attempt := req
		attempt.Provider = name
		if base != "" && i > 0 {
			attempt.ID = fmt.Sprintf("%s-%d", base, i+1)
		}
		rec, sb, err := m.Create(ctx, attempt)
		if err == nil {
			return rec, sb, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
		if ctx.Err() != nil {
			break
		}
		if len(members) > 1 && i+1 < len(members) {
			m.log.Warn("chain member failed; trying the next", "provider", name, "next", members[i+1], "err", err)
		}
	}
	return agentenv.Record{}, agentenv.Sandbox{}, errors.Join(errs...)
}

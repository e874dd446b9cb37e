package eval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// interruptedMsg is the error of a group or an episode whose runner died while it ran.
const interruptedMsg = "interrupted: its process died"

// Settle gives a final status to what a dead runner left "running": each group whose owner
// process is gone from this host (Alive says so), and its episodes still running, become
// cancelled with interruptedMsg and now as their end, so that no listing shows them running for
// good. --resume runs such a group's unfinished episodes as before. It returns the ids it
// marked; groups of other hosts and of live processes are left alone.
func Settle(ctx context.Context, l agentenv.Ledger, now time.Time) ([]string, error) {
	st := Store{Ledger: l}
	// Only running groups are read: gc runs this each time, over a ledger of thousands.
	groups, err := st.list(ctx, []agentenv.RunStatus{agentenv.RunRunning}, 0)
	if err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	var marked []string
	var errs []error
	for _, g := range groups {
		if g.Owner.IsZero() || Alive(g) {
			continue
		}
		runs, err := st.Episodes(ctx, g)
		if err != nil {
			errs = append(errs, fmt.Errorf("settle %s: %w", g.ID, err))
			continue
		}
		for _, r := range runs {
			if r.Status != agentenv.RunRunning {
				continue
			}
			task.SetOutcome(&r, task.OutcomeCancelled)
			r.Error, r.Ended = interruptedMsg, now
			if err := l.Runs().Put(ctx, r); err != nil {
				errs = append(errs, fmt.Errorf("settle %s: run %s: %w", g.ID, r.ID, err))
				continue
			}
			marked = append(marked, r.ID)
		}
		g.Status, g.Error, g.Ended, g.Owner = agentenv.RunCancelled, interruptedMsg, now, agentenv.Owner{}
		if err := st.Put(ctx, g); err != nil {
			errs = append(errs, fmt.Errorf("settle: %w", err))
			continue
		}
		marked = append(marked, g.ID)
	}
	return marked, errors.Join(errs...)
}

package eval

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentenv/agentenv"
)

// Cancel cancels group id, which runs on the workers of r.Remote, and returns it as its
// workers left it (cancelled, its episodes torn down) once they have, bounded by ctx. A group
// that has ended is returned as it is, with ended true. A group run by the process that
// started it is ErrConflict (that process, not the ledger, holds its episodes: Ctrl-C there);
// one on workers r.Remote does not reach, ErrInvalid.
func (r *Runner) Cancel(ctx context.Context, id string) (g Group, ended bool, err error) {
	l := r.ledger()
	if l == nil {
		return Group{}, false, fmt.Errorf("cancel group %s: no ledger: %w", id, agentenv.ErrInvalid)
	}
	st := Store{Ledger: l}
	if g, err = st.Get(ctx, id); errors.Is(err, agentenv.ErrNotFound) {
		return Group{}, false, fmt.Errorf("no group %s in the ledger (agentenv runs ls --group lists them): %w", id, agentenv.ErrInvalid)
	} else if err != nil {
		return Group{}, false, fmt.Errorf("cancel group %s: %w", id, err)
	}
	if g.Status != agentenv.RunRunning {
		return g, true, nil
	}
	switch {
	case g.Runner == "" && !Alive(g):
		return g, false, fmt.Errorf("group %s: the process that ran it (pid %d) is gone: 'agentenv gc' marks it cancelled and removes what it left: %w", id, g.Owner.PID, agentenv.ErrConflict)
	case g.Runner == "":
		return g, false, fmt.Errorf("group %s runs in the process that started it (pid %d on %s): cancel it there with Ctrl-C: %w", id, g.Owner.PID, g.Owner.Host, agentenv.ErrConflict)
	case r.Remote == nil:
		return g, false, fmt.Errorf("group %s runs on %s workers: give --runner %s (and its server), or set runner.backend: %w", id, g.Runner, g.Runner, agentenv.ErrInvalid)
	case r.Remote.Name() != g.Runner:
		return g, false, fmt.Errorf("group %s runs on %s workers, not %s: %w", id, g.Runner, r.Remote.Name(), agentenv.ErrInvalid)
	}
	if err := r.Remote.Cancel(ctx, id); err != nil {
		return g, false, fmt.Errorf("cancel group %s: %w", id, err)
	}
	if g, err = st.Get(ctx, id); err != nil {
		return g, false, fmt.Errorf("cancel group %s: %w", id, err)
	}
	return g, false, nil
}

package task

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/lifecycle"
)

func (r *Runner) newEpisode(t *Task, opts RunOptions, in instance, sl Slot, num, total int, emit func(Event)) *episode {
	id := lifecycle.NewID("run")
	e := &episode{
		r: r, t: t, opts: opts, id: id, num: num, total: total, seed: in.seed, fields: in.fields,
		log: r.logger().With("run", id, "task", t.Name), emit: emit,
		states: map[string]*stepState{}, sandboxes: map[string]sandboxRef{}, envs: map[string]*envRef{},
	}
	for _, s := range t.Steps {
		e.states[s.ID] = &stepState{rec: agentenv.StepRecord{ID: s.ID, Type: s.Type, Status: agentenv.StepPending}}
	}
	attrs := map[string]string{"episode": fmt.Sprint(num), "file": t.File, "instance": fmt.Sprint(sl.Instance), "attempt": fmt.Sprint(sl.Attempt)}
	maps.Copy(attrs, opts.Attrs)
	for k, v := range in.seed {
		attrs["seed."+k] = v
	}
	e.doc = agentenv.Run{ID: id, Task: t.Name, TaskDigest: t.Digest, Status: agentenv.RunRunning, Attrs: attrs, Created: time.Now().UTC(),
		Attempts: slices.Clone(opts.Prior)}
	return e
}

// run runs the episode from its first ledger write to its teardown.
func (e *episode) run(ctx context.Context) Episode {
	start := time.Now()
	e.emit(Event{Kind: EventEpisode, Time: start, Run: e.id, Episode: e.num, Episodes: e.total, Status: "started"})
	e.save(ctx)
	var fatal, infra error
	for attempt := 1; ; attempt++ {
		astart := time.Now()
		fatal = e.runDAG(ctx)
		infra = e.infraError(fatal)
		if infra == nil || attempt > e.opts.infraRetries(e.t) || ctx.Err() != nil {
			break
		}
		if err := e.retryEpisode(ctx, attempt, astart, infra); err != nil {
			infra = err // what the failed attempt left could not be torn down: stop here
			break
		}
	}

	res := Episode{Run: e.id}
	score := e.score()
	res.Score = score
	switch {
	case errors.Is(fatal, errCancelled) || ctx.Err() != nil:
		res.Outcome, res.Error = OutcomeCancelled, "cancelled"
	case infra != nil:
		res.Outcome, res.Error = OutcomeError, infra.Error()
	case fatal != nil:
		res.Outcome, res.Error = OutcomeFailed, fatal.Error()
	case score == nil:
		res.Outcome = OutcomeUnscored
	case *score >= 1:
		res.Outcome = OutcomePassed
	default:
		res.Outcome = OutcomeScoredBelow
	}

	if e.opts.Keep {
		// Tools served by this process cannot outlive it: kept sandboxes are held without them,
		// their trajectory kept first.
		for step, env := range e.liveEnvs() {
			if e.isLocal(step) {
				e.keepGatewayTrajectory(ctx, step, env)
			}
		}
		e.closeLocal(ctx)
		res.Kept = true
		e.mu.Lock()
		e.doc.Attrs["kept"] = "true"
		e.mu.Unlock()
	} else {
		tstart := time.Now()
		for step, env := range e.liveEnvs() {
			e.keepGatewayTrajectory(ctx, step, env)
		}
		e.closeLocal(ctx)
		rc, err := e.r.teardownRun(ctx, e.id, e.trackedDeployments())
		res.Receipt = &rc
		ev := Event{Kind: EventTeardown, Time: time.Now(), Run: e.id, Episode: e.num, Episodes: e.total,
			Status:  fmt.Sprintf("%d down", rc.Count(agentenv.OutcomeTerminated)+rc.Count(agentenv.OutcomeAlreadyGone)),
			Elapsed: time.Since(tstart)}
		if err != nil {
			ev.Error = err.Error()
			if res.Outcome != OutcomeCancelled {
				res.Outcome = OutcomeError // a teardown that failed is the infrastructure's
			}
			res.Error = joinMsg(res.Error, err.Error())
		}
		e.emit(ev)
	}

	e.mu.Lock()
	e.doc.Score, e.doc.Receipt, e.doc.Ended = score, res.Receipt, time.Now().UTC()
	e.doc.Error = res.Error
	SetOutcome(&e.doc, res.Outcome)
	e.mu.Unlock()
	e.save(ctx)

	e.mu.Lock()
	res.Error = e.redact(res.Error)
	res.Warnings = append([]string(nil), e.warnings...)
	res.Attempts = append([]agentenv.RunAttempt(nil), e.doc.Attempts...)
	for _, s := range e.t.Steps {
		res.Steps = append(res.Steps, e.states[s.ID].rec)
	}
	e.mu.Unlock()
	res.Elapsed = time.Since(start)
	e.emit(Event{Kind: EventEpisode, Time: time.Now(), Run: e.id, Episode: e.num, Episodes: e.total,
		Status: string(res.Outcome), Score: res.Score, Elapsed: res.Elapsed, Error: res.Error})
	return res
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// score combines the task's verifiers by its score mode; nil if it has none. A verifier that
// did not run (skipped after a closed gate, say) scores 0 and counts; one of weight 0 is left
// out, whatever it scored.
func (e *episode) score() *float64 {
	ids := e.t.Verifiers()
	if len(ids) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var scores, weights []float64
	for _, id := range ids {
		w := e.t.step(id).Weight
		if w <= 0 {
			continue
		}
		score := 0.0
		if s := e.states[id].rec.Score; s != nil && e.states[id].rec.Status == agentenv.StepPassed {
			score = *s
		}
		scores, weights = append(scores, score), append(weights, w)
	}
	s := combine(e.t.Score, scores, weights)
	return &s
}

// liveEnvs returns the envs the episode made and has not torn down, by their step.
func (e *episode) liveEnvs() map[string]DeployedEnv {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]DeployedEnv{}
	for _, id := range e.envOrder {
		if env := e.envs[id]; !env.tornDown {
			out[id] = env.DeployedEnv
		}
	}
	return out
}

// closeLocal closes the tools the episode serves in this process (serve_tools steps) of the
// steps ids, or of every step if none is given, and marks them torn down. It runs on a
// detached bounded context (localTools.close); a failure is logged, as the sandboxes' teardown
// goes on and takes what the tools ran there with them.
func (e *episode) closeLocal(ctx context.Context, ids ...string) {
	e.mu.Lock()
	var envs []*envRef
	for _, id := range e.envOrder {
		if env := e.envs[id]; env.local != nil && !env.tornDown && (len(ids) == 0 || slices.Contains(ids, id)) {
			env.tornDown = true
			envs = append(envs, env)
		}
	}
	e.mu.Unlock()
	for _, env := range slices.Backward(envs) {
		if err := env.local.shut(ctx); err != nil {
			e.log.Warn("served tools", "step", env.ID, "err", err)
		}
	}
}

// isLocal reports whether the env of step is served in this process (serve_tools).
func (e *episode) isLocal(step string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	env := e.envs[step]
	return env != nil && env.local != nil
}

// trackedDeployments returns the deployments the episode made and has not torn down, newest
// first.
func (e *episode) trackedDeployments() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, id := range slices.Backward(e.envOrder) {
		if env := e.envs[id]; !env.tornDown && env.local == nil {
			out = append(out, env.ID)
		}
	}
	return out
}

// teardownRun tears down the deployments (tracked by the episode, and any the ledger names for
// the run), then every record of the run that is not gone, on a detached bounded context.
func (r *Runner) teardownRun(ctx context.Context, runID string, deployments []string) (agentenv.Receipt, error) {
	tctx, cancel := cleanup.Context(ctx, r.teardownTimeout())
	defer cancel()
	rc := agentenv.Receipt{Started: time.Now().UTC()}
	var errs []error
	l := r.ledger()
	if l != nil && r.Deployer != nil {
		docs, err := l.Deployments().List(tctx, agentenv.DocStates(agentenv.DeploymentDeploying, agentenv.DeploymentLive, agentenv.DeploymentFailed), 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("list deployments: %w", err))
		}
		for _, d := range docs {
			if d.Run == runID && !slices.Contains(deployments, d.ID) {
				deployments = append(deployments, d.ID)
			}
		}
	}
	for _, id := range deployments {
		if r.Deployer == nil {
			errs = append(errs, fmt.Errorf("deployment %s: no env deployer", id))
			continue
		}
		drc, err := r.Deployer.Teardown(tctx, id)
		rc.Items = append(rc.Items, drc.Items...)
		if err != nil {
			errs = append(errs, fmt.Errorf("deployment %s: %w", id, err))
		}
	}
	if l != nil {
		recs, err := l.List(tctx, agentenv.Filter{Run: runID})
		if err != nil {
			errs = append(errs, fmt.Errorf("list records: %w", err))
		}
		recs = slices.DeleteFunc(recs, func(x agentenv.Record) bool { return x.State == agentenv.StateGone })
		if len(recs) > 0 {
			if r.Manager == nil {
				errs = append(errs, fmt.Errorf("%d records left and no lifecycle manager", len(recs)))
			} else {
				mrc, err := r.Manager.Teardown(tctx, recs)
				rc.Items = append(rc.Items, mrc.Items...)
				if err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	rc.Finished = time.Now().UTC()
	if err := errors.Join(errs...); err != nil {
		return rc, fmt.Errorf("teardown %s: %w", runID, err)
	}
	return rc, nil
}

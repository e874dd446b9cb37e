//go:build integration

package temporal_test

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
)

// BenchmarkTemporal takes issue 29's measures side by side in one run, on this machine's
// engine and the Temporal dev server (run it with -benchtime 1x; each measure is one group):
//
//   - orchestration per episode: `run hello --k 20 --concurrency 1` on the local runner, then on
//     Temporal with one worker and with three; an episode's cycle is the time from its start to
//     the next one's (so it holds the episode and whatever the runner does between two), and the
//     overhead is Temporal's median cycle less the local one's;
//   - the notes task's episodes per minute on one, two and three workers of two slots (k 6,
//     concurrency 6);
//   - from a worker's kill -9, in the middle of an episode, to that slot's episode starting
//     again on another worker (its heartbeat timeout, 30 s, is most of it).
func BenchmarkTemporal(b *testing.B) {
	r := newRig(b)
	if res := r.run(b.Context(), "images", "build"); res.code != 0 {
		b.Fatalf("images build: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	for b.Loop() {
		local := r.cycles(r.submit("run", "hello", "--k", "20", "--concurrency", "1", "--runner", "local"))
		w1 := r.startWorker("o1", 1)
		one := r.cycles(r.submit("run", "hello", "--k", "20", "--concurrency", "1", "--runner", "temporal"))
		w2, w3 := r.startWorker("o2", 1), r.startWorker("o3", 1)
		three := r.cycles(r.submit("run", "hello", "--k", "20", "--concurrency", "1", "--runner", "temporal"))
		for _, w := range []*worker{w1, w2, w3} {
			w.stop(b)
		}
		lp50, lp95 := quantiles(local)
		b.ReportMetric(ms(lp50), "local-cycle-p50-ms")
		b.ReportMetric(ms(lp95), "local-cycle-p95-ms")
		for _, m := range []struct {
			name string
			c    []time.Duration
		}{{"1w", one}, {"3w", three}} {
			p50, p95 := quantiles(m.c)
			b.ReportMetric(ms(p50), "temporal-"+m.name+"-cycle-p50-ms")
			b.ReportMetric(ms(p95), "temporal-"+m.name+"-cycle-p95-ms")
			b.ReportMetric(ms(p50-lp50), "temporal-"+m.name+"-overhead-p50-ms")
		}

		notes, _ := filepath.Abs("../examples/notes-task/task.yaml")
		evalFile := r.writeEval("notes-rate", 6, map[string]int{notes: 6})
		var workers []*worker
		for n := 1; n <= 3; n++ {
			workers = append(workers, r.startWorker("n"+string(rune('0'+n)), 2))
			start := time.Now()
			g := r.group(r.submit("run", evalFile, "--runner", "temporal"))
			took := time.Since(start)
			if g.Totals.Passed != 6 {
				b.Errorf("notes on %d workers: %+v, want 6 passed", n, g.Totals)
			}
			b.ReportMetric(6/took.Minutes(), "notes-episodes-per-min-"+string(rune('0'+n))+"w")
		}
		for _, w := range workers {
			w.stop(b)
		}

		b.ReportMetric(r.killToRerun(b).Seconds(), "kill-to-rerun-s")
	}
}

// submit runs agentenv with args (a group, run in the foreground), failing b unless it exits
// 0, and returns the group's id.
func (r *rig) submit(args ...string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 10*time.Minute)
	defer cancel()
	res := r.run(ctx, args...)
	id := regexp.MustCompile(`group-[0-9a-f]+`).FindString(res.stdout + res.stderr)
	if res.code != 0 || id == "" {
		r.t.Fatalf("agentenv %v: exit %d\n%s%s", args, res.code, res.stdout, res.stderr)
	}
	return id
}

// cycles returns, for group id's episodes in the order they started, the time from each
// start to the next.
func (r *rig) cycles(id string) []time.Duration {
	r.t.Helper()
	st := eval.Store{Ledger: r.led}
	g, err := st.Get(r.t.Context(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	runs, err := st.Episodes(r.t.Context(), g)
	if err != nil {
		r.t.Fatal(err)
	}
	starts := make([]time.Time, 0, len(runs))
	for _, run := range runs {
		starts = append(starts, run.Created)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	var out []time.Duration
	for i := 1; i < len(starts); i++ {
		out = append(out, starts[i].Sub(starts[i-1]))
	}
	return out
}

// killToRerun starts three workers of two slots, submits four episodes of a task that holds
// its sandbox for 40 s, kills (SIGKILL) a worker in the middle of one once all four run, and
// returns the time from the kill to the first episode of the group started after it: a lost
// slot running again elsewhere.
func (r *rig) killToRerun(b *testing.B) time.Duration {
	workers := []*worker{r.startWorker("k1", 2), r.startWorker("k2", 2), r.startWorker("k3", 2)}
	defer func() {
		for _, w := range workers {
			if w.cmd.ProcessState == nil {
				w.stop(b)
			}
		}
	}()
	evalFile := r.writeEval("kill", 4, map[string]int{r.slowTask(40): 4})
	res := r.run(b.Context(), "run", evalFile, "--runner", "temporal", "--detach")
	id := regexp.MustCompile(`group-[0-9a-f]+`).FindString(res.stdout)
	if res.code != 0 || id == "" {
		b.Fatalf("run --detach: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	for len(r.liveSandboxes(ctx)) < 4 {
		if ctx.Err() != nil {
			b.Fatal("four episodes never ran at once")
		}
		time.Sleep(100 * time.Millisecond)
	}
	victim := r.killBusy(ctx, workers, time.Now())
	if victim == nil {
		b.Fatal("no busy worker to kill")
	}
	killed := time.Now()
	st := eval.Store{Ledger: r.led}
	g, err := st.Get(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	for {
		runs, err := st.Episodes(ctx, g)
		if err != nil {
			b.Fatal(err)
		}
		for _, run := range runs {
			if run.Created.After(killed) {
				rerun := run.Created.Sub(killed)
				r.waitGroup(id, 5*time.Minute)
				return rerun
			}
		}
		if ctx.Err() != nil {
			b.Fatal("no episode started again after the kill")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// liveSandboxes are the sandbox records of the rig's ledger that are live.
func (r *rig) liveSandboxes(ctx context.Context) []agentenv.Record {
	recs, _ := r.led.List(ctx, agentenv.Filter{States: []agentenv.State{agentenv.StateLive}})
	var out []agentenv.Record
	for _, rec := range recs {
		if rec.Kind == agentenv.KindSandbox {
			out = append(out, rec)
		}
	}
	return out
}

func quantiles(d []time.Duration) (p50, p95 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(d))
	return s[len(s)/2], s[min(len(s)-1, len(s)*95/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

package task

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
)

// trace records what probe steps did, to check order and overlap.
type trace struct {
	mu      sync.Mutex
	events  []string
	running int
	peak    int
}

func (tr *trace) add(ev string, delta int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.events = append(tr.events, ev)
	tr.running += delta
	tr.peak = max(tr.peak, tr.running)
}

func (tr *trace) index(ev string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Index(tr.events, ev)
}

// probe is a test step: it sleeps, blocks until cancelled, fails, or outputs a value.
type probe struct {
	Value string `yaml:"value"`
	Sleep string `yaml:"sleep"`
	Block bool   `yaml:"block"` // wait until the step's context ends
	Fail  bool   `yaml:"fail"`
	Score string `yaml:"score"` // for the check kind

	tr *trace
}

func (p *probe) Check() error { return nil }
func (p *probe) Refs() []Ref  { return nil }
func (p *probe) Run(ctx context.Context, sc *scope) (Result, error) {
	id := sc.s.ID
	p.tr.add("start "+id, 1)
	defer func() {
		p.tr.add("end "+id, -1)
	}()
	if p.Sleep != "" {
		d, _ := time.ParseDuration(p.Sleep)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
	if p.Block {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // some cleanup, which the drain must wait for
		return Result{}, ctx.Err()
	}
	if p.Fail {
		return Result{}, errors.New("probe failed")
	}
	res := Result{Outputs: map[string]string{"value": p.Value}}
	if p.Score != "" {
		var s float64
		fmt.Sscan(p.Score, &s)
		res.Score = &s
	}
	return res, nil
}

func testKinds(tr *trace) map[string]kind {
	ks := builtinKinds()
	ks["probe"] = kind{new: func() Step { return &probe{tr: tr} }, outputs: []Output{{"value", OutputString}}, timeout: 5 * time.Second}
	ks["check"] = kind{new: func() Step { return &probe{tr: tr} }, outputs: []Output{{"value", OutputString}}, verifier: true, timeout: 5 * time.Second}
	return ks
}

func testRunner(t *testing.T) *Runner {
	t.Helper()
	l, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &Runner{Ledger: l, DrainTimeout: 3 * time.Second, Workdir: t.TempDir()}
}

func TestDAG(t *testing.T) {
	type want struct {
		outcome  Outcome
		status   map[string]agentenv.StepStatus // step id -> status
		before   [][2]string                    // event a happens before event b
		peak     int                            // most probes at once; 0: not checked
		outputs  map[string]string              // "step.output" -> value
		errorHas string
	}
	tests := []struct {
		name   string
		src    string
		opts   RunOptions
		seeds  string
		cancel time.Duration // cancel the run after this long
		want   want
	}{{
		name: "chain",
		src: `steps:
- {id: a, type: probe, sleep: 10ms}
- {id: b, type: probe}
- {id: c, type: probe}`,
		want: want{outcome: OutcomeUnscored, peak: 1, before: [][2]string{{"end a", "start b"}, {"end b", "start c"}},
			status: map[string]agentenv.StepStatus{"a": agentenv.StepPassed, "b": agentenv.StepPassed, "c": agentenv.StepPassed}},
	}, {
		name: "fan-out and fan-in",
		src: `steps:
- {id: a, type: probe}
- {id: b, type: probe, depends_on: [a], sleep: 60ms}
- {id: c, type: probe, depends_on: [a], sleep: 60ms}
- {id: d, type: probe, depends_on: [b, c]}`,
		want: want{outcome: OutcomeUnscored, peak: 2,
			before: [][2]string{{"end a", "start b"}, {"end a", "start c"}, {"start c", "end b"}, {"start b", "end c"}, {"end b", "start d"}, {"end c", "start d"}}},
	}, {
		name: "empty depends_on runs at once",
		src: `steps:
- {id: a, type: probe, sleep: 60ms}
- {id: b, type: probe, depends_on: [], sleep: 60ms}`,
		want: want{outcome: OutcomeUnscored, peak: 2, before: [][2]string{{"start b", "end a"}}},
	}, {
		name: "concurrency bound",
		opts: RunOptions{StepConcurrency: 1},
		src: `steps:
- {id: a, type: probe, depends_on: [], sleep: 20ms}
- {id: b, type: probe, depends_on: [], sleep: 20ms}
- {id: c, type: probe, depends_on: [], sleep: 20ms}`,
		want: want{outcome: OutcomeUnscored, peak: 1},
	}, {
		name: "tolerant failure goes on",
		src: `steps:
- {id: a, type: probe, fail: true, fail_task_on_error: false}
- {id: b, type: probe, value: ran}
- {id: v, type: check, score: "1"}`,
		want: want{outcome: OutcomePassed, status: map[string]agentenv.StepStatus{"a": agentenv.StepFailed, "b": agentenv.StepPassed},
			outputs: map[string]string{"b.value": "ran"}},
	}, {
		name: "fatal failure cancels and drains in-flight steps",
		src: `steps:
- {id: a, type: probe}
- {id: slow, type: probe, depends_on: [a], block: true}
- {id: bad, type: probe, depends_on: [a], sleep: 20ms, fail: true}
- {id: after, type: probe, depends_on: [bad]}
- {id: v, type: check, score: "1", depends_on: [slow]}`,
		want: want{outcome: OutcomeError, errorHas: "step bad: probe failed",
			status: map[string]agentenv.StepStatus{"a": agentenv.StepPassed, "slow": agentenv.StepCancelled, "bad": agentenv.StepFailed, "after": agentenv.StepSkipped, "v": agentenv.StepSkipped},
			before: [][2]string{{"end slow", "episode end"}}},
	}, {
		name:   "cancellation drains in-flight steps",
		cancel: 50 * time.Millisecond,
		src: `steps:
- {id: a, type: probe, block: true}
- {id: b, type: probe, depends_on: [], block: true}
- {id: c, type: probe}`,
		want: want{outcome: OutcomeCancelled,
			status: map[string]agentenv.StepStatus{"a": agentenv.StepCancelled, "b": agentenv.StepCancelled, "c": agentenv.StepCancelled},
			before: [][2]string{{"end a", "episode end"}, {"end b", "episode end"}}},
	}, {
		name: "step timeout",
		src: `steps:
- {id: a, type: probe, block: true, timeout: 30ms}`,
		want: want{outcome: OutcomeError, errorHas: "timed out after 30ms", status: map[string]agentenv.StepStatus{"a": agentenv.StepFailed}},
	}, {
		name: "output references",
		src: `steps:
- {id: a, type: probe, value: A}
- {id: b, type: probe, value: "${steps.a.outputs.value}-b"}
- {id: v, type: check, score: "0.5", value: "${steps.b.outputs.value}"}`,
		want: want{outcome: OutcomeScoredBelow, outputs: map[string]string{"b.value": "A-b", "v.value": "A-b", "v.score": "0.5"}},
	}, {
		name: "reference to a failed step's output",
		src: `steps:
- {id: a, type: probe, fail: true, fail_task_on_error: false}
- {id: v, type: check, score: "1", value: "${steps.a.outputs.value}", fail_task_on_error: false}`,
		// v could not run: an infrastructure error, so the episode is no sample.
		want: want{outcome: OutcomeError, status: map[string]agentenv.StepStatus{"v": agentenv.StepFailed}, outputs: map[string]string{"v.score": "0"}},
	}, {
		name:  "placeholders",
		seeds: "who,n\nada,1\nbob,2\n",
		src: `steps:
- {id: a, type: probe, value: "<who>-<n>"}`,
		want: want{outcome: OutcomeUnscored},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := &trace{}
			tk, err := Loader{}.parse("t.yaml", []byte(tc.src), testKinds(tr))
			if err != nil {
				t.Fatalf("parse = %v", err)
			}
			r := testRunner(t)
			opts := tc.opts
			if tc.seeds != "" {
				opts.Seeds = filepath.Join(t.TempDir(), "seeds.csv")
				if err := os.WriteFile(opts.Seeds, []byte(tc.seeds), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctx := t.Context()
			if tc.cancel > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.cancel)
				defer cancel()
			}
			sum, err := r.Run(ctx, tk, opts)
			tr.add("episode end", 0)
			if tc.cancel > 0 {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Run = %v, want the context's error", err)
				}
			} else if err != nil {
				t.Fatalf("Run = %v", err)
			}
			if tc.seeds != "" {
				var got []string
				for _, ep := range sum.Episodes {
					got = append(got, ep.Steps[0].Outputs["value"])
				}
				if !slices.Equal(got, []string{"ada-1", "bob-2"}) {
					t.Errorf("values per seeds row = %v, want [ada-1 bob-2]", got)
				}
				return
			}
			ep := sum.Episodes[0]
			if ep.Outcome != tc.want.outcome {
				t.Errorf("outcome = %s (error %q), want %s", ep.Outcome, ep.Error, tc.want.outcome)
			}
			if !strings.Contains(ep.Error, tc.want.errorHas) {
				t.Errorf("error = %q, want it to contain %q", ep.Error, tc.want.errorHas)
			}
			got := map[string]agentenv.StepRecord{}
			for _, s := range ep.Steps {
				got[s.ID] = s
			}
			for id, st := range tc.want.status {
				if got[id].Status != st {
					t.Errorf("step %s: status %s (error %q), want %s", id, got[id].Status, got[id].Error, st)
				}
			}
			for k, v := range tc.want.outputs {
				id, name, _ := strings.Cut(k, ".")
				if got[id].Outputs[name] != v {
					t.Errorf("output %s = %q, want %q", k, got[id].Outputs[name], v)
				}
			}
			for _, b := range tc.want.before {
				i, j := tr.index(b[0]), tr.index(b[1])
				if i < 0 || j < 0 || i > j {
					t.Errorf("want %q before %q; events %v", b[0], b[1], tr.events)
				}
			}
			if tc.want.peak > 0 && tr.peak != tc.want.peak {
				t.Errorf("at most %d steps ran at once, want %d; events %v", tr.peak, tc.want.peak, tr.events)
			}
			doc, err := r.runs().Get(t.Context(), ep.Run)
			if err != nil {
				t.Fatalf("run record: %v", err)
			}
			wantStatus := map[Outcome]agentenv.RunStatus{OutcomeCancelled: agentenv.RunCancelled, OutcomeFailed: agentenv.RunFailed, OutcomeError: agentenv.RunError}[tc.want.outcome]
			if wantStatus == "" {
				wantStatus = agentenv.RunCompleted
			}
			if doc.Status != wantStatus {
				t.Errorf("run record status = %s, want %s", doc.Status, wantStatus)
			}
		})
	}
}

func TestCombine(t *testing.T) {
	tests := []struct {
		mode    ScoreMode
		scores  []float64
		weights []float64
		want    float64
	}{
		{AllPass, []float64{1, 1}, nil, 1},
		{AllPass, []float64{1, 0.9}, nil, 0},
		{AllPass, nil, nil, 0},
		{AnyPass, []float64{0, 1}, nil, 1},
		{AnyPass, []float64{0.5, 0.9}, nil, 0},
		{WeightedAverage, []float64{1, 0}, []float64{3, 1}, 0.75},
		{WeightedAverage, []float64{0.5, 0.5}, []float64{1, 1}, 0.5},
		{Min, []float64{0.7, 0.2, 1}, nil, 0.2},
		// Min is the default: on pass/fail verifiers it is all_pass, and a lone judge's grade
		// is the episode's score, not 0.
		{Min, []float64{1, 1}, nil, 1},
		{Min, []float64{1, 0}, nil, 0},
		{Min, []float64{0.75}, nil, 0.75},
	}
	for _, tc := range tests {
		if got := combine(tc.mode, tc.scores, tc.weights); got != tc.want {
			t.Errorf("combine(%s, %v, %v) = %v, want %v", tc.mode, tc.scores, tc.weights, got, tc.want)
		}
	}
}

func TestPassAtK(t *testing.T) {
	tests := []struct {
		n, c, k int
		want    float64
	}{
		{1, 1, 1, 1},
		{1, 0, 1, 0},
		{4, 2, 1, 0.5},           // pass@1 is c/n
		{4, 1, 2, 0.5},           // 1 - C(3,2)/C(4,2) = 1 - 3/6
		{5, 2, 3, 0.9},           // 1 - C(3,3)/C(5,3) = 1 - 1/10
		{10, 3, 5, 1 - 21.0/252}, // 1 - C(7,5)/C(10,5)
		{4, 4, 4, 1},
		{4, 0, 4, 0},
		{3, 1, 3, 1}, // n-c < k: every draw of 3 includes the pass
	}
	for _, tc := range tests {
		got, err := passAtK(tc.n, tc.c, tc.k)
		if err != nil || abs(got-tc.want) > 1e-12 {
			t.Errorf("passAtK(n=%d, c=%d, k=%d) = %v, %v; want %v", tc.n, tc.c, tc.k, got, err, tc.want)
		}
		// The closed form with binomials must agree with the product form.
		if tc.n-tc.c >= tc.k {
			if alt := 1 - binomial(tc.n-tc.c, tc.k)/binomial(tc.n, tc.k); abs(alt-got) > 1e-12 {
				t.Errorf("passAtK(%d,%d,%d) = %v, closed form %v", tc.n, tc.c, tc.k, got, alt)
			}
		}
	}
	for _, bad := range [][3]int{{4, 1, 0}, {4, 1, 5}, {4, 5, 1}} {
		if _, err := passAtK(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("passAtK(%v) = nil error, want one", bad)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

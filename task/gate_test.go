package task

import (
	"math"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
)

// A verifier's gate: below its min_score the verifier passes with its score, the steps that
// depend on it (and theirs) are skipped and score 0 in the task's score, the steps that do
// not depend on it run, and the episode is a scored sample, not an error, never retried. A
// verifier of weight 0 runs and is recorded but is left out of the score.
func TestGates(t *testing.T) {
	type want struct {
		score   float64
		outcome Outcome
		status  map[string]agentenv.StepStatus
		errHas  map[string]string // step id -> part of its recorded error
		gate    map[string]string // step id -> part of its output "gate"; "" for none
		scores  map[string]float64
	}
	chain := func(min string) string {
		return `score: weighted_average
retries: {infra: 2}
steps:
- {id: a, type: probe}
- {id: v1, type: check, score: "0.5", min_score: ` + min + `}
- {id: b, type: probe, depends_on: [v1]}
- {id: v2, type: check, score: "1", depends_on: [b]}
- {id: v3, type: check, score: "1", depends_on: [v2]}
- {id: side, type: probe, depends_on: [a]}
`
	}
	for _, tc := range []struct {
		name, src string
		want      want
	}{{
		name: "closed: the rest of the chain is skipped and scores 0 in the mean",
		src:  chain("0.6"),
		want: want{score: 0.5 / 3, outcome: OutcomeScoredBelow,
			status: map[string]agentenv.StepStatus{"v1": agentenv.StepPassed, "b": agentenv.StepSkipped, "v2": agentenv.StepSkipped,
				"v3": agentenv.StepSkipped, "side": agentenv.StepPassed},
			errHas: map[string]string{"b": "the gate of v1 closed: score 0.5 is below min_score 0.6", "v2": "dependency b did not run", "v1": ""},
			gate:   map[string]string{"v1": "closed: score 0.5 is below min_score 0.6", "v2": ""},
			scores: map[string]float64{"v1": 0.5, "v2": 0, "v3": 0}},
	}, {
		name: "open at its minimum: everything runs",
		src:  chain("0.5"),
		want: want{score: 2.5 / 3, outcome: OutcomeScoredBelow,
			status: map[string]agentenv.StepStatus{"v1": agentenv.StepPassed, "b": agentenv.StepPassed, "v2": agentenv.StepPassed, "v3": agentenv.StepPassed},
			gate:   map[string]string{"v1": ""}},
	}, {
		name: "weight 0 is recorded, not scored, in every mode",
		src: `score: min
steps:
- {id: v1, type: check, score: "0.25", weight: 0}
- {id: v2, type: check, score: "1"}
`,
		want: want{score: 1, outcome: OutcomePassed, scores: map[string]float64{"v1": 0.25, "v2": 1}},
	}, {
		name: "the last verifier scores alone; a closed gate before it leaves 0",
		src: `score: weighted_average
steps:
- {id: v1, type: check, score: "0", weight: 0, min_score: 1}
- {id: v2, type: check, score: "1", depends_on: [v1]}
`,
		want: want{score: 0, outcome: OutcomeScoredBelow,
			status: map[string]agentenv.StepStatus{"v1": agentenv.StepPassed, "v2": agentenv.StepSkipped},
			scores: map[string]float64{"v1": 0, "v2": 0}},
	}, {
		name: "the last verifier scores alone; the others' scores are kept",
		src: `score: weighted_average
steps:
- {id: v1, type: check, score: "0.5", weight: 0}
- {id: v2, type: check, score: "1", depends_on: [v1]}
`,
		want: want{score: 1, outcome: OutcomePassed, scores: map[string]float64{"v1": 0.5, "v2": 1}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &trace{}
			tk, err := Loader{}.parse("t.yaml", []byte(tc.src), testKinds(tr))
			if err != nil {
				t.Fatalf("parse = %v", err)
			}
			sum, err := testRunner(t).Run(t.Context(), tk, RunOptions{})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			ep := sum.Episodes[0]
			if ep.Outcome != tc.want.outcome || ep.Score == nil || math.Abs(*ep.Score-tc.want.score) > 1e-9 {
				t.Errorf("outcome %s, score %v (error %q); want %s, %v", ep.Outcome, ptrf(ep.Score), ep.Error, tc.want.outcome, tc.want.score)
			}
			if len(ep.Attempts) != 0 {
				t.Errorf("attempts %v: a closed gate is no error to retry", ep.Attempts)
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
			for id, part := range tc.want.errHas {
				if e := got[id].Error; (part == "") != (e == "") || !strings.Contains(e, part) {
					t.Errorf("step %s: error %q, want %q in it", id, e, part)
				}
			}
			for id, part := range tc.want.gate {
				if g, ok := got[id].Outputs["gate"]; (part == "") == ok || !strings.Contains(g, part) {
					t.Errorf("step %s: output gate %q (set %v), want %q", id, g, ok, part)
				}
			}
			for id, s := range tc.want.scores {
				if got[id].Score == nil || *got[id].Score != s {
					t.Errorf("step %s: recorded score %v, want %v", id, ptrf(got[id].Score), s)
				}
			}
		})
	}
}

func ptrf(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func TestGateFieldsRefused(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"steps:\n- {id: a, type: probe, min_score: 0.5}", "t.yaml:2: steps[0].min_score: only verifiers have a gate (min_score)"},
		{"steps:\n- {id: a, type: check, min_score: 1.5}", "t.yaml:2: steps[0].min_score: want a number in [0,1], got 1.5"},
		{"steps:\n- {id: a, type: check, min_score: high}", `steps[0].min_score: want a number in [0,1], got "high"`},
		{"steps:\n- {id: a, type: check, weight: -1}", "steps[0].weight: want 0 or a positive number, got -1"},
		{"steps:\n- {id: a, type: check, weight: 0}\n- {id: b, type: check, weight: 0}", "t.yaml:2: steps[0].weight: every verifier of the task's score has weight 0"},
		{"steps:\n- {id: s, type: deploy_sandbox, provider: process}\n- {id: r, type: reward, sandbox: s, min_rewards: {reward: .nan}}", "min_rewards.reward: want a number, got NaN"},
	} {
		_, err := Loader{}.parse("t.yaml", []byte(c.src), testKinds(&trace{}))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q in it", c.src, err, c.want)
		}
	}
	// A verifier of weight 0 beside one that scores is fine.
	if _, err := (Loader{}).parse("t.yaml", []byte("steps:\n- {id: a, type: check, weight: 0}\n- {id: b, type: check}"), testKinds(&trace{})); err != nil {
		t.Errorf("weight 0 beside a scored verifier: %v", err)
	}
}

func TestRewardGate(t *testing.T) {
	m := map[string]float64{"reward": 0.5, "style": 1}
	type gateCase struct {
		mins map[string]float64
		want string
	}
	for _, c := range []gateCase{
		{nil, ""},
		{map[string]float64{"reward": 0.5}, ""},
		{map[string]float64{"reward": 1}, "reward 0.5 is below min_rewards.reward 1"},
		{map[string]float64{"style": 1, "speed": 0.1}, "metric speed is not in the reward file (min_rewards.speed 0.1)"},
		{map[string]float64{"reward": 0.6, "style": 1.5}, "reward 0.5 is below min_rewards.reward 0.6; style 1 is below min_rewards.style 1.5"},
	} {
		if got := rewardGate(m, c.mins); got != c.want {
			t.Errorf("rewardGate(%v, %v) = %q, want %q", m, c.mins, got, c.want)
		}
	}
}

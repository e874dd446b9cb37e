package task

import (
	"math"
	"testing"
)

func TestSummarizeCounts(t *testing.T) {
	one, half, zero := 1.0, 0.5, 0.0
	s := Summarize("t", 2, []Episode{
		{Instance: 0, Outcome: OutcomePassed, Score: &one},
		{Instance: 0, Outcome: OutcomeScoredBelow, Score: &half},
		{Instance: 1, Outcome: OutcomeFailed, Score: &zero},
		{Instance: 1, Outcome: OutcomeFailed, Score: &zero},
	})
	if s.Passed != 1 || s.ScoredBelow != 1 || s.Failed != 2 || s.Errors != 0 || s.Cancelled != 0 || s.Instances != 2 || s.Scored != 4 {
		t.Errorf("counts = %+v", s)
	}
	if s.MeanScore != 0.375 {
		t.Errorf("mean = %v, want 0.375", s.MeanScore)
	}
	// Instance 0: n=2, c=1: pass@1 = 0.5, pass@2 = 1. Instance 1: 0 and 0.
	if len(s.PassAt) != 2 || s.PassAt["1"] != 0.25 || s.PassAt["2"] != 0.5 {
		t.Errorf("pass@ = %v, want 1: 0.25, 2: 0.5", s.PassAt)
	}
}

// An error or cancelled episode is no sample: the figures equal those of the finished
// episodes alone.
func TestSummarizeExcludesErrors(t *testing.T) {
	one, zero := 1.0, 0.0
	finished := []Episode{
		{Instance: 0, Outcome: OutcomePassed, Score: &one},
		{Instance: 0, Outcome: OutcomeFailed, Score: &zero},
		{Instance: 0, Outcome: OutcomePassed, Score: &one},
		{Instance: 1, Outcome: OutcomePassed, Score: &one},
		{Instance: 1, Outcome: OutcomeFailed, Score: &zero},
		{Instance: 1, Outcome: OutcomeFailed, Score: &zero},
	}
	base := Summarize("t", 3, finished)
	with := Summarize("t", 3, append(append([]Episode(nil), finished...),
		Episode{Instance: 0, Outcome: OutcomeError, Score: &zero},
		Episode{Instance: 1, Outcome: OutcomeCancelled},
	))
	if with.Errors != 1 || with.Cancelled != 1 {
		t.Errorf("errors %d cancelled %d, want 1 and 1", with.Errors, with.Cancelled)
	}
	if with.MeanScore != base.MeanScore || with.MeanCI95 != base.MeanCI95 || with.Scored != base.Scored {
		t.Errorf("mean %v %v over %d, want %v %v over %d", with.MeanScore, with.MeanCI95, with.Scored, base.MeanScore, base.MeanCI95, base.Scored)
	}
	for k, v := range base.PassAt {
		if with.PassAt[k] != v {
			t.Errorf("pass@%s = %v with errors, %v without", k, with.PassAt[k], v)
		}
	}
	if len(base.PassAt) != 3 {
		t.Errorf("pass@ = %v, want k = 1..3", base.PassAt)
	}
	// (2/3 + 1/3) / 2 for pass@1; pass@3 = 1 for both instances.
	if abs(base.PassAt["1"]-0.5) > 1e-12 || base.PassAt["3"] != 1 {
		t.Errorf("pass@ = %v", base.PassAt)
	}
}

// A k larger than an instance's finished episodes has no unbiased estimate and is left out.
func TestSummarizePassAtUndefined(t *testing.T) {
	one := 1.0
	s := Summarize("t", 3, []Episode{
		{Instance: 0, Outcome: OutcomePassed, Score: &one},
		{Instance: 0, Outcome: OutcomePassed, Score: &one},
		{Instance: 0, Outcome: OutcomeError},
		{Instance: 1, Outcome: OutcomeError}, // no finished episode: the instance is left out
		{Instance: 1, Outcome: OutcomeError},
		{Instance: 1, Outcome: OutcomeError},
	})
	if _, ok := s.PassAt["3"]; ok || s.PassAt["1"] != 1 || s.PassAt["2"] != 1 {
		t.Errorf("pass@ = %v, want 1 and 2 only", s.PassAt)
	}
	if s.Instances != 2 || s.Errors != 4 {
		t.Errorf("instances %d errors %d", s.Instances, s.Errors)
	}
	none := Summarize("t", 2, []Episode{{Outcome: OutcomeError}})
	if len(none.PassAt) != 0 || none.MeanScore != 0 || none.MeanCI95 != [2]float64{} {
		t.Errorf("all errors: %+v", none)
	}
}

func TestMeanCI95(t *testing.T) {
	tests := []struct {
		xs       []float64
		mean     float64
		low, hig float64
	}{
		{nil, 0, 0, 0},
		{[]float64{0.4}, 0.4, 0, 1},
		{[]float64{1, 1, 1}, 1, 1, 1},
		// mean 0.5, s = 0.5, n = 4: half = 3.182 * 0.5 / 2 = 0.7955, clipped.
		{[]float64{0, 1, 0.5, 0.5}, 0.5, 0, 1},
		// mean 0.5, s = sqrt(0.02/3·... ) computed below.
		{[]float64{0.4, 0.5, 0.6}, 0.5, 0.5 - 4.303*0.1/math.Sqrt(3), 0.5 + 4.303*0.1/math.Sqrt(3)},
	}
	for _, tc := range tests {
		m, ci := meanCI95(tc.xs)
		if abs(m-tc.mean) > 1e-12 || abs(ci[0]-tc.low) > 1e-9 || abs(ci[1]-tc.hig) > 1e-9 {
			t.Errorf("meanCI95(%v) = %v %v, want %v [%v %v]", tc.xs, m, ci, tc.mean, tc.low, tc.hig)
		}
	}
}

// The expansion past the table agrees with published quantiles.
func TestT975(t *testing.T) {
	for df, want := range map[int]float64{1: 12.706, 30: 2.042, 31: 2.0395, 40: 2.0211, 60: 2.0003, 120: 1.9799, 1000: 1.9623} {
		if got := t975(df); abs(got-want) > 5e-4 {
			t.Errorf("t975(%d) = %v, want %v", df, got, want)
		}
	}
	for df := 1; df < 200; df++ {
		if t975(df+1) > t975(df) {
			t.Errorf("t975 rises at %d", df)
		}
	}
}

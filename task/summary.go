package task

import (
	"math"
	"strconv"
	"time"

	"github.com/agentenv/agentenv"
)

// Episode is one episode's line in a Summary.
type Episode struct {
	Run      string                `json:"run,omitempty"` // empty if it never started
	Instance int                   `json:"instance"`      // 0-based seeds row (0 without seeds)
	Attempt  int                   `json:"attempt"`       // 1..K within its instance
	Seed     map[string]string     `json:"seed,omitempty"`
	Outcome  Outcome               `json:"outcome"`
	Score    *float64              `json:"score,omitempty"`
	Error    string                `json:"error,omitempty"`
	Elapsed  time.Duration         `json:"elapsed_ns"`
	Receipt  *agentenv.Receipt     `json:"receipt,omitempty"` // nil when kept (--keep)
	Kept     bool                  `json:"kept,omitempty"`
	Warnings []string              `json:"warnings,omitempty"` // such as run records not written
	Steps    []agentenv.StepRecord `json:"steps,omitempty"`
	// Attempts are the attempts retried after an infrastructure error, as in the run document.
	Attempts []agentenv.RunAttempt `json:"attempts,omitempty"`
}

// Summary is what a Run call did (or, from Summarize, any set of episodes).
//
// Only finished episodes (Outcome.Finished) are samples. MeanScore is the mean score of the
// finished episodes that have one (Scored of them), and MeanCI95 its 95% confidence interval by
// Student's t (mean ± t(0.975, n-1)·s/√n, s the sample standard deviation), clipped to [0,1];
// with one score the interval is [0,1], with none both are 0.
//
// PassAt holds pass@k for every k from 1 to K (keys "1".."K"), averaged over the instances
// (seeds rows) that have a finished episode, each estimated without bias as
// 1 - C(n-c,k)/C(n,k) from its n finished episodes of which c passed. pass@1 is then the
// fraction of finished episodes that passed. A k is left out when an instance has fewer than
// k finished episodes (errors or cancellations took them), as pass@k is not defined there.
type Summary struct {
	Task        string             `json:"task"`
	TaskDigest  string             `json:"task_digest"`
	K           int                `json:"k"`
	Instances   int                `json:"instances"`
	Episodes    []Episode          `json:"episodes"`
	Passed      int                `json:"passed"`
	ScoredBelow int                `json:"scored_below"`
	Unscored    int                `json:"unscored"`
	Failed      int                `json:"failed"`
	Errors      int                `json:"errors"`
	Cancelled   int                `json:"cancelled"`
	Scored      int                `json:"scored"` // finished episodes with a score
	MeanScore   float64            `json:"mean_score"`
	MeanCI95    [2]float64         `json:"mean_ci95"`
	PassAt      map[string]float64 `json:"pass_at"` // "1".."K" as decimal strings
	Elapsed     time.Duration      `json:"elapsed_ns"`
}

// AllPassed reports whether every episode passed (or, for a task without verifiers, completed
// unscored).
func (s Summary) AllPassed() bool {
	return len(s.Episodes) > 0 && s.Passed+s.Unscored == len(s.Episodes)
}

// Summarize counts eps, the episodes of task name run k per instance: the counts by outcome,
// the mean score with its interval and pass@k for k = 1..k (see Summary). Episodes are told
// apart by Instance; a caller pooling several tasks numbers their instances apart first.
// Instances is the number of distinct instances in eps. TaskDigest and Elapsed are left to
// the caller.
func Summarize(name string, k int, eps []Episode) Summary {
	s := Summary{Task: name, K: k, Episodes: eps, PassAt: map[string]float64{}}
	var scores []float64
	seen := map[int]bool{}
	byInstance := map[int][2]int{} // finished n, passed c
	for _, ep := range eps {
		seen[ep.Instance] = true
		switch ep.Outcome {
		case OutcomePassed:
			s.Passed++
		case OutcomeScoredBelow:
			s.ScoredBelow++
		case OutcomeUnscored:
			s.Unscored++
		case OutcomeFailed:
			s.Failed++
		case OutcomeError:
			s.Errors++
		case OutcomeCancelled:
			s.Cancelled++
		}
		if !ep.Outcome.Finished() {
			continue
		}
		if ep.Score != nil {
			scores = append(scores, *ep.Score)
		}
		nc := byInstance[ep.Instance]
		nc[0]++
		if ep.Outcome == OutcomePassed {
			nc[1]++
		}
		byInstance[ep.Instance] = nc
	}
	s.Instances = len(seen)
	s.Scored = len(scores)
	s.MeanScore, s.MeanCI95 = meanCI95(scores)
	if len(byInstance) == 0 {
		return s
	}
	for k := 1; k <= s.K; k++ {
		var total float64
		ok := true
		for _, nc := range byInstance {
			p, err := passAtK(nc[0], nc[1], k)
			if err != nil {
				ok = false
				break
			}
			total += p
		}
		if ok {
			s.PassAt[strconv.Itoa(k)] = total / float64(len(byInstance))
		}
	}
	return s
}

// meanCI95 returns the mean of xs and its 95% Student's t interval clipped to [0,1] ([0,1]
// for one value, zeros for none).
func meanCI95(xs []float64) (float64, [2]float64) {
	n := len(xs)
	if n == 0 {
		return 0, [2]float64{}
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(n)
	if n == 1 {
		return mean, [2]float64{0, 1}
	}
	var sq float64
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	half := t975(n-1) * math.Sqrt(sq/float64(n-1)) / math.Sqrt(float64(n))
	return mean, [2]float64{clamp(mean - half), clamp(mean + half)}
}

// t975Table holds the 0.975 quantile of Student's t for 1..30 degrees of freedom.
var t975Table = [...]float64{
	12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
}

// t975 is the 0.975 quantile of Student's t with df >= 1 degrees of freedom: the table up to
// 30, then the Cornish-Fisher expansion around the normal's 1.959964 (error below 1e-4 there).
func t975(df int) float64 {
	if df <= len(t975Table) {
		return t975Table[df-1]
	}
	const z = 1.959963985
	d := float64(df)
	z3, z5 := z*z*z, z*z*z*z*z
	return z + (z3+z)/(4*d) + (5*z5+16*z3+3*z)/(96*d*d)
}

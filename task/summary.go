package task

import (
	"strconv"
	"time"

	"github.com/agentenv/agentenv"
)

// Outcome is how an episode ended, for the summary.
type Outcome string

// Episode outcomes. An episode passed when no fatal step failed, its teardown was clean and its
// score is 1; unscored when the task has no verifier.
const (
	OutcomePassed      Outcome = "passed"
	OutcomeScoredBelow Outcome = "scored below 1"
	OutcomeUnscored    Outcome = "unscored"
	OutcomeFailed      Outcome = "failed"
	OutcomeCancelled   Outcome = "cancelled"
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
}

// Summary is what a Run call did.
//
// PassAt holds pass@k averaged over the task's instances (seeds rows), for k = 1 and k = K
// (episodes per instance), each estimated without bias as 1 - C(n-c,k)/C(n,k) from the n = K
// episodes of an instance of which c passed. pass@1 is then the fraction of episodes that
// passed, and pass@K whether any of an instance's K episodes passed.
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
	Cancelled   int                `json:"cancelled"`
	MeanScore   float64            `json:"mean_score"`
	PassAt      map[string]float64 `json:"pass_at"` // "1" and "K" as decimal strings
	Elapsed     time.Duration      `json:"elapsed_ns"`
}

// AllPassed reports whether every episode passed (or, for a task without verifiers, completed
// unscored).
func (s Summary) AllPassed() bool {
	return len(s.Episodes) > 0 && s.Passed+s.Unscored == len(s.Episodes)
}

// tally fills the counts, the mean score and pass@k from s.Episodes.
func (s *Summary) tally() {
	s.PassAt = map[string]float64{}
	if len(s.Episodes) == 0 {
		return
	}
	var sum float64
	byInstance := map[int][2]int{} // n, c
	for _, ep := range s.Episodes {
		switch ep.Outcome {
		case OutcomePassed:
			s.Passed++
		case OutcomeScoredBelow:
			s.ScoredBelow++
		case OutcomeUnscored:
			s.Unscored++
		case OutcomeFailed:
			s.Failed++
		case OutcomeCancelled:
			s.Cancelled++
		}
		if ep.Score != nil {
			sum += *ep.Score
		}
		nc := byInstance[ep.Instance]
		nc[0]++
		if ep.Outcome == OutcomePassed {
			nc[1]++
		}
		byInstance[ep.Instance] = nc
	}
	s.MeanScore = sum / float64(len(s.Episodes))
	for _, k := range []int{1, s.K} {
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
}

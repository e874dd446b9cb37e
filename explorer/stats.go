package explorer

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// Stats are a group's figures and the data of its charts.
type Stats struct {
	Scored int      `json:"scored"`         // episodes with a score
	Mean   *float64 `json:"mean,omitempty"` // mean score of the scored episodes
	// Low and High bound the mean's 95% interval (normal approximation, clipped to [0,1]).
	Low       float64  `json:"ci_low"`
	High      float64  `json:"ci_high"`
	PassAt    []PassAt `json:"pass_at"`         // k = 1 .. episodes per instance
	Scores    []Bin    `json:"score_histogram"` // ten bins over [0,1]
	Durations []Bin    `json:"duration_histogram"`
	Funnel    []Funnel `json:"funnel"` // per step, in task order
}

// PassAt is pass@k averaged over the group's instances (the unbiased estimator).
type PassAt struct {
	K     int     `json:"k"`
	Value float64 `json:"value"`
}

// Bin is one bar of a histogram; Frac is its count over the largest bin's, for drawing.
type Bin struct {
	Label string  `json:"label"`
	Count int     `json:"count"`
	Frac  float64 `json:"-"`
}

// Funnel counts how the group's episodes went through one step.
type Funnel struct {
	Step    string `json:"step"`
	Type    string `json:"type"`
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"` // skipped, cancelled or never reached
	Running int    `json:"running"`
	Total   int    `json:"total"`
}

// Frac returns n over the funnel's total, for drawing.
func (f Funnel) Frac(n int) float64 {
	if f.Total == 0 {
		return 0
	}
	return float64(n) / float64(f.Total)
}

func statsOf(runs []agentenv.Run, now time.Time) Stats {
	var st Stats
	var scores []float64
	durations := make([]float64, 0, len(runs))
	perInstance := map[string][2]int{} // n, passed
	steps := []Funnel{}
	index := map[string]int{}
	for _, r := range runs {
		e := episodeOf(r, now)
		if r.Score != nil && e.Outcome != string(task.OutcomeRunning) {
			scores = append(scores, *r.Score)
		}
		if e.Outcome != string(task.OutcomeRunning) {
			durations = append(durations, e.Duration)
			nc := perInstance[instanceKey(r)]
			nc[0]++
			if e.Outcome == string(task.OutcomePassed) {
				nc[1]++
			}
			perInstance[instanceKey(r)] = nc
		}
		for _, s := range r.Steps {
			i, ok := index[s.ID]
			if !ok {
				i = len(steps)
				index[s.ID] = i
				steps = append(steps, Funnel{Step: s.ID, Type: s.Type})
			}
			f := &steps[i]
			f.Total++
			switch string(s.Status) {
			case string(agentenv.StepPassed):
				f.Passed++
			case string(agentenv.StepFailed):
				f.Failed++
			case string(agentenv.StepRunning):
				f.Running++
			default:
				f.Skipped++
			}
		}
	}
	st.Funnel = steps
	st.Scored = len(scores)
	if n := len(scores); n > 0 {
		var sum, sq float64
		for _, s := range scores {
			sum += s
		}
		mean := sum / float64(n)
		for _, s := range scores {
			sq += (s - mean) * (s - mean)
		}
		half := 0.0
		if n > 1 {
			half = 1.96 * math.Sqrt(sq/float64(n-1)) / math.Sqrt(float64(n))
		}
		st.Mean, st.Low, st.High = &mean, math.Max(0, mean-half), math.Min(1, mean+half)
	}
	st.PassAt = passAtKs(perInstance)
	st.Scores = histogram(scores, 10, 0, 1, func(lo, hi float64) string { return fmt.Sprintf("%.1f–%.1f", lo, hi) })
	hi := 0.0
	for _, d := range durations {
		hi = math.Max(hi, d)
	}
	if len(durations) > 0 {
		st.Durations = histogram(durations, 10, 0, math.Max(hi, 0.001), func(lo, hi float64) string { return fmt.Sprintf("%s–%s", seconds(lo), seconds(hi)) })
	}
	return st
}

// passAtKs returns pass@k for k = 1 up to the fewest episodes any instance has.
func passAtKs(perInstance map[string][2]int) []PassAt {
	if len(perInstance) == 0 {
		return nil
	}
	kmax := math.MaxInt
	for _, nc := range perInstance {
		kmax = min(kmax, nc[0])
	}
	out := make([]PassAt, 0, kmax)
	for k := 1; k <= kmax; k++ {
		total := 0.0
		for _, nc := range perInstance {
			total += passAtK(nc[0], nc[1], k)
		}
		out = append(out, PassAt{K: k, Value: total / float64(len(perInstance))})
	}
	return out
}

// passAtK is 1 - C(n-c,k)/C(n,k), the chance that k of n episodes, c of them passed, hold a
// pass; for 1 <= k <= n.
func passAtK(n, c, k int) float64 {
	if n-c < k {
		return 1
	}
	q := 1.0
	for i := n - c + 1; i <= n; i++ {
		q *= 1 - float64(k)/float64(i)
	}
	return 1 - q
}

// histogram counts vs into bins equal bins over [lo, hi] (the last bin holds hi).
func histogram(vs []float64, bins int, lo, hi float64, label func(lo, hi float64) string) []Bin {
	out := make([]Bin, bins)
	w := (hi - lo) / float64(bins)
	for i := range out {
		out[i].Label = label(lo+float64(i)*w, lo+float64(i+1)*w)
	}
	for _, v := range vs {
		i := int((v - lo) / w)
		out[min(max(i, 0), bins-1)].Count++
	}
	top := slices.MaxFunc(out, func(a, b Bin) int { return a.Count - b.Count }).Count
	for i := range out {
		if top > 0 {
			out[i].Frac = float64(out[i].Count) / float64(top)
		}
	}
	return out
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}

package bench

import (
	"fmt"
	"slices"
	"time"
)

// Measure is one timed operation, sampled Samples times.
type Measure struct {
	Name    string          `json:"name"`
	Samples []time.Duration `json:"samples_ns"`
	// Unit overrides how figures are read: "" for wall-clock durations of whole commands.
	Note string `json:"note,omitempty"`
	// Skipped says why the measure has no samples.
	Skipped string `json:"skipped,omitempty"`
}

// Median returns the median sample (the mean of the middle two for an even count), 0 if none.
func (m Measure) Median() time.Duration {
	s := slices.Sorted(slices.Values(m.Samples))
	switch n := len(s); {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	default:
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// P95 returns the 95th percentile by the nearest-rank method, 0 if no sample.
func (m Measure) P95() time.Duration {
	s := slices.Sorted(slices.Values(m.Samples))
	if len(s) == 0 {
		return 0
	}
	rank := (95*len(s) + 99) / 100 // ceil(0.95 n), 1-based
	return s[max(rank, 1)-1]
}

// Comparison sets agentenv's measure beside its baseline.
type Comparison struct {
	Name     string `json:"name"`
	Agentenv string `json:"agentenv"` // measure names
	Baseline string `json:"baseline"`
}

// Ratio returns a's median over b's, or 0 when either has no samples.
func Ratio(a, b Measure) float64 {
	if len(a.Samples) == 0 || len(b.Samples) == 0 || b.Median() == 0 {
		return 0
	}
	return float64(a.Median()) / float64(b.Median())
}

// format prints d with a precision that suits its size.
func format(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
}

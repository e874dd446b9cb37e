package task

import (
	"fmt"
	"math"
)

// combine folds scores (each in [0,1]) by mode; weights are used by WeightedAverage and must
// be as many as scores. No scores combine to 0: nothing was shown to pass.
func combine(mode ScoreMode, scores, weights []float64) float64 {
	if len(scores) == 0 {
		return 0
	}
	switch mode {
	case AnyPass:
		for _, s := range scores {
			if s >= 1 {
				return 1
			}
		}
		return 0
	case WeightedAverage:
		var sum, wsum float64
		for i, s := range scores {
			sum += weights[i] * s
			wsum += weights[i]
		}
		if wsum <= 0 {
			return 0
		}
		return clamp(sum / wsum)
	case Min:
		m := 1.0
		for _, s := range scores {
			m = math.Min(m, s)
		}
		return clamp(m)
	default: // AllPass
		for _, s := range scores {
			if s < 1 {
				return 0
			}
		}
		return 1
	}
}

func clamp(s float64) float64 { return math.Max(0, math.Min(1, s)) }

// binomial returns C(n, k) as a float64 (0 when k > n or k < 0).
func binomial(n, k int) float64 {
	if k < 0 || k > n {
		return 0
	}
	r := 1.0
	for i := 1; i <= k; i++ {
		r *= float64(n-k+i) / float64(i)
	}
	return r
}

// passAtK is the unbiased estimator of pass@k from n episodes of which c passed:
// 1 - C(n-c, k) / C(n, k) (Chen et al. 2021). It needs 1 <= k <= n and 0 <= c <= n.
func passAtK(n, c, k int) (float64, error) {
	if k < 1 || k > n || c < 0 || c > n {
		return 0, fmt.Errorf("pass@%d of %d episodes with %d passed: want 1 <= k <= n and 0 <= c <= n", k, n, c)
	}
	if n-c < k {
		return 1, nil
	}
	// Product form, stable for large n: prod_{i=n-c+1}^{n} (1 - k/i).
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p, nil
}

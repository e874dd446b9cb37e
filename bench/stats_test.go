package bench

import (
	"testing"
	"time"
)

func TestMedianP95(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	tests := []struct {
		samples     []time.Duration
		median, p95 time.Duration
	}{
		{nil, 0, 0},
		{ms(5), 5 * time.Millisecond, 5 * time.Millisecond},
		{ms(4, 1, 3, 2), 2500 * time.Microsecond, 4 * time.Millisecond},
		{ms(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 10500 * time.Microsecond, 19 * time.Millisecond},
	}
	for _, tt := range tests {
		m := Measure{Samples: tt.samples}
		if got := m.Median(); got != tt.median {
			t.Errorf("Median(%v) = %v, want %v", tt.samples, got, tt.median)
		}
		if got := m.P95(); got != tt.p95 {
			t.Errorf("P95(%v) = %v, want %v", tt.samples, got, tt.p95)
		}
	}
	a, b := Measure{Samples: ms(30)}, Measure{Samples: ms(10)}
	if r := Ratio(a, b); r != 3 {
		t.Errorf("Ratio = %v, want 3", r)
	}
	if r := Ratio(a, Measure{}); r != 0 {
		t.Errorf("Ratio against nothing = %v, want 0", r)
	}
}

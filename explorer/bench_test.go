package explorer_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agentenv/agentenv/explorer"
)

// BenchmarkPages10k measures the pages and the API over a ledger of 10,000 episodes (2,250
// groups of 4 and one group of 1,000, written once): the time to the first
// byte of the answer and to the whole of it.
//
//	go test -run '^$' -bench Pages10k -benchtime 20x ./explorer/
func BenchmarkPages10k(b *testing.B) {
	r := newRig(b, explorer.Config{})
	t0 := time.Now().Add(-48 * time.Hour)
	start := time.Now()
	for g := range 2250 {
		r.putGroup(b, "notes-task", 4, t0.Add(time.Duration(g)*time.Minute), func(i int) *float64 { return ptr(float64(i % 2)) })
	}
	big := r.putGroup(b, "big-task", 1000, t0.Add(-time.Hour), func(i int) *float64 { return ptr(float64(i%3) / 2) })
	b.Logf("wrote 10,000 episodes in %s", time.Since(start).Round(time.Millisecond))
	for _, path := range []string{"/runs", "/api/v1/runs", "/runs?outcome=passed", "/runs?q=notes-task-1", "/", "/api/v1/groups", "/groups/" + big[0]} {
		b.Run(path, func(b *testing.B) {
			var ttfb, total time.Duration
			for b.Loop() {
				s := time.Now()
				resp, err := http.Get(r.srv.URL + path)
				if err != nil {
					b.Fatal(err)
				}
				first := time.Since(s)
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || n == 0 {
					b.Fatalf("GET %s = %d, %d bytes, %v", path, resp.StatusCode, n, err)
				}
				ttfb += first
				total += time.Since(s)
			}
			b.ReportMetric(float64(ttfb.Microseconds())/float64(b.N)/1000, "ms-ttfb")
			b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms-whole")
		})
	}
}

package gateway_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentenv/agentenv/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchSessions are the client session counts of BenchmarkCall.
var benchSessions = []int{1, 8, 64, 256}

// benchRuns is how often BenchmarkCall alternates the two paths at each session count.
var benchRuns = flag.Int("gateway.runs", 1, "BenchmarkCall: runs of direct then gateway at each session count")

// BenchmarkCall measures tools/call of one echo backend over n concurrent client sessions,
// straight to the backend and through the gateway, side by side: each session count runs
// direct, gateway, then a plain reverse proxy (the floor of one more HTTP hop), -gateway.runs times (go test names the repetitions #01, #02, ...),
// so that a noisy machine loads both alike. Besides ns/op (the
// wall time per call over all sessions) it reports the p50 and p99 latency of one call and
// the CPU time per call of every process on the path (client, backend, and gateway), and the
// gateway process's own CPU time and allocations per call. The backend and the gateway run in
// processes of their own (benchproc_test.go); -benchmem counts the client's allocations only.
func BenchmarkCall(b *testing.B) {
	be := startChild(b, "backend")
	gw := startChild(b, "gateway", benchBackendEnv+"="+be.url)
	proxy := startChild(b, "proxy", benchBackendEnv+"="+be.url)
	for _, n := range benchSessions {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			direct := openSessions(b, be.url, n, benchClientOpt(""))
			through := openSessions(b, gw.url, n, authClientOpt())
			proxied := openSessions(b, proxy.url, n, benchClientOpt(""))
			for range *benchRuns {
				b.Run("direct", func(b *testing.B) { benchCalls(b, direct, nil, be) })
				b.Run("gateway", func(b *testing.B) { benchCalls(b, through, &gw, be, gw) })
				b.Run("proxy", func(b *testing.B) { benchCalls(b, proxied, &proxy, be, proxy) })
			}
		})
	}
}

func authClientOpt() *mcp.StreamableClientTransport { return benchClientOpt(testToken) }

// benchClientOpt returns a client with enough idle connections for 64 sessions, so that the
// figures measure the server side rather than client connection churn.
func benchClientOpt(token string) *mcp.StreamableClientTransport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return &mcp.StreamableClientTransport{HTTPClient: &http.Client{Transport: headerTransport{tr, h}}}
}

// benchCalls runs b.N tools/call over the sessions at once and reports the latency
// percentiles, the CPU time per call of this process and the children on the path, and those
// of the middle process gw (the gateway or the proxy), if not nil.
func benchCalls(b *testing.B, sessions []*mcp.ClientSession, gw *child, path ...child) {
	lat := make([][]time.Duration, len(sessions))
	var next sync.Mutex
	left := b.N
	var gwCPU0 time.Duration
	var gwAllocs0 memStats
	if gw != nil {
		gwCPU0, gwAllocs0 = gw.ownCPU(), gw.allocs(b)
	}
	cpu0 := cpuTime(path...)
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Go(func() {
			for {
				next.Lock()
				if left == 0 {
					next.Unlock()
					return
				}
				left--
				next.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
				lat[i] = append(lat[i], time.Since(start))
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	perCall := func(v float64) float64 { return v / float64(b.N) }
	b.ReportMetric(perCall(float64((cpuTime(path...) - cpu0).Microseconds())), "cpu-µs/op")
	if gw != nil {
		a := gw.allocs(b)
		b.ReportMetric(perCall(float64((gw.ownCPU() - gwCPU0).Microseconds())), "gw-cpu-µs/op")
		b.ReportMetric(perCall(float64(a.Mallocs-gwAllocs0.Mallocs)), "gw-allocs/op")
		b.ReportMetric(perCall(float64(a.Bytes-gwAllocs0.Bytes)), "gw-B/op")
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
}

func openSessions(b testing.TB, endpoint string, n int, tmpl *mcp.StreamableClientTransport) []*mcp.ClientSession {
	b.Helper()
	out := make([]*mcp.ClientSession, n)
	for i := range out {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t := &mcp.StreamableClientTransport{Endpoint: endpoint}
		if tmpl != nil {
			t.HTTPClient = tmpl.HTTPClient
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, t, nil)
		cancel()
		if err != nil {
			b.Fatalf("connect: %v", err)
		}
		out[i] = cs
	}
	b.Cleanup(func() {
		for _, cs := range out {
			_ = cs.Close()
		}
	})
	return out
}

// BenchmarkIdleSessionMemory reports the heap held per idle MCP session (client and server
// side together, in this one process), opened directly and through the gateway.
func BenchmarkIdleSessionMemory(b *testing.B) {
	const n = 200
	be := newBackend(b, "a", false, "echo")
	_, gw := newGateway(b, gateway.Config{}, be)
	for _, c := range []struct {
		name, url string
		tmpl      *mcp.StreamableClientTransport
	}{{"direct", be.url, benchClientOpt("")}, {"gateway", gw.URL + "/mcp", authClientOpt()}} {
		b.Run(c.name, func(b *testing.B) {
			// One measure whatever b.N: opening n sessions is the unit of work.
			before := heap()
			sessions := openSessions(b, c.url, n, c.tmpl)
			time.Sleep(200 * time.Millisecond) // let the standalone SSE streams settle
			after := heap()
			b.ReportMetric(float64(after-before)/n, "B/session")
			for _, cs := range sessions {
				_ = cs.Close()
			}
		})
	}
}

// selfCPU returns the user and system CPU time of this process so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

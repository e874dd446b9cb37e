package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func BenchmarkCallDirect(b *testing.B) {
	be := newBackend(b, "a", false, "echo")
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) { benchCalls(b, be.url, n, benchClientOpt("")) })
	}
}

func BenchmarkCallGateway(b *testing.B) {
	be := newBackend(b, "a", false, "echo")
	_, gw := newGateway(b, gateway.Config{}, be)
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) { benchCalls(b, gw.URL+"/mcp", n, authClientOpt()) })
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

// benchCalls runs b.N tools/call over n concurrent client sessions and reports the latency
// percentiles.
func benchCalls(b *testing.B, endpoint string, n int, tmpl *mcp.StreamableClientTransport) {
	sessions := openSessions(b, endpoint, n, tmpl)
	lat := make([][]time.Duration, n)
	var next sync.Mutex
	left := b.N
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

func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

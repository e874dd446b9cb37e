//go:build integration && !e2e

package kubernetes_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/providertest"
)

// BenchmarkCreate200 creates 200 sandboxes at once (each a Pod with one port and a Service
// named by its alias) in one deployment namespace, through the provider's concurrency cap and
// rate limit, and reports creates per second (200 over the wall time from the first call to the
// last return) and p50/p95 from each Create call to the Pod being accepted (the watch's ADDED
// event) and to it running (simulated by kwok; Create returns then).
//
//	go test -tags integration -run '^$' -bench Create200 -benchtime 1x ./provider/kubernetes/
func BenchmarkCreate200(b *testing.B) {
	const n = 200
	p := newProvider(b, nil)
	cs := clientset(b, p)
	for b.Loop() {
		ctx := b.Context()
		net := providertest.NewID()
		labels := func(id string) map[string]string {
			return map[string]string{agentenv.LabelRecord: id, agentenv.LabelRun: "bench", agentenv.LabelDeployment: net, agentenv.LabelRole: "mcp_server"}
		}
		if _, err := p.CreateNetwork(ctx, agentenv.NetworkSpec{Name: net, Labels: labels(net)}); err != nil {
			b.Fatal(err)
		}
		w, err := cs.Pods(net).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		accepted := map[string]time.Time{}
		running := map[string]time.Time{}
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for ev := range w.ResultChan() {
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				now := time.Now()
				mu.Lock()
				if _, seen := accepted[pod.Name]; !seen && ev.Type == watch.Added {
					accepted[pod.Name] = now
				}
				if _, seen := running[pod.Name]; !seen && pod.Status.Phase == corev1.PodRunning {
					running[pod.Name] = now
				}
				mu.Unlock()
			}
		}()

		started := make([]time.Time, n)
		returned := make([]time.Time, n)
		ids := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range n {
			ids[i] = fmt.Sprintf("c%03d-%s", i, net[2:])
			wg.Go(func() {
				started[i] = time.Now()
				_, errs[i] = p.Create(ctx, agentenv.SandboxSpec{
					Name: ids[i], Image: "agentenv-kwok:none", Labels: labels(ids[i]), Ports: []int{8080},
					Network: net, Aliases: []string{fmt.Sprintf("c%03d", i)}, Expires: time.Now().Add(time.Hour),
				})
				returned[i] = time.Now()
			})
		}
		wg.Wait()
		elapsed := time.Since(t0)
		// Give the watch a moment to deliver the last events, bounded.
		time.Sleep(200 * time.Millisecond)
		w.Stop()
		<-watched

		b.StopTimer()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		var twg sync.WaitGroup
		for _, id := range ids {
			twg.Go(func() {
				if err := p.Terminate(cctx, id); err != nil {
					b.Errorf("Terminate(%s) = %v", id, err)
				}
			})
		}
		twg.Wait()
		if err := p.Terminate(cctx, net); err != nil {
			b.Errorf("Terminate(%s) = %v", net, err)
		}
		cancel()
		b.StartTimer()

		for i, err := range errs {
			if err != nil {
				b.Fatalf("Create(%s) = %v", ids[i], err)
			}
		}
		var toAccepted, toRunning, toReturn []time.Duration
		mu.Lock()
		for i, id := range ids {
			if a, ok := accepted[id]; ok {
				toAccepted = append(toAccepted, a.Sub(started[i]))
			}
			if r, ok := running[id]; ok {
				toRunning = append(toRunning, r.Sub(started[i]))
			}
			toReturn = append(toReturn, returned[i].Sub(started[i]))
		}
		mu.Unlock()
		if len(toAccepted) != n || len(toRunning) != n {
			b.Errorf("watched %d accepted and %d running of %d", len(toAccepted), len(toRunning), n)
		}
		rate := float64(n) / elapsed.Seconds()
		b.ReportMetric(rate, "creates/s")
		b.ReportMetric(ms(pct(toAccepted, 50)), "p50-accepted-ms")
		b.ReportMetric(ms(pct(toAccepted, 95)), "p95-accepted-ms")
		b.ReportMetric(ms(pct(toRunning, 50)), "p50-running-ms")
		b.ReportMetric(ms(pct(toRunning, 95)), "p95-running-ms")
		b.ReportMetric(ms(pct(toReturn, 95)), "p95-create-ms")
		b.Logf("%d creates in %v: %.1f creates/s", n, elapsed.Round(time.Millisecond), rate)
		if rate < 45 {
			b.Logf("below the goal of 45 creates/s")
		}
	}
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

package soak

import (
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tc := range []struct {
		p    int
		want time.Duration
	}{{50, 5}, {95, 10}, {100, 10}, {10, 1}, {0, 1}} {
		if got := Percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%d = %d, want %d", tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %d, want 0", got)
	}
}

func TestDeployFiguresFromTheSummary(t *testing.T) {
	step := func(ready, queued string) agentenv.StepRecord {
		return agentenv.StepRecord{Type: task.TypeDeployEnv, Outputs: map[string]string{"ready_after": ready, "queue_wait": queued}}
	}
	sum := task.Summary{Elapsed: 2 * time.Minute, Episodes: []task.Episode{
		{Steps: []agentenv.StepRecord{step("2s", "0s"), {Type: "prompt_agent"}}},
		{Steps: []agentenv.StepRecord{step("4s", "3s")}},
		{Steps: []agentenv.StepRecord{step("", "")}}, // a deploy that failed says nothing
		{},
	}}
	var l Load
	l.deployFigures(sum)
	if l.Deploys != 2 || l.ReadyP50 != 2*time.Second || l.ReadyP95 != 4*time.Second || l.QueueMax != 3*time.Second {
		t.Errorf("load = %+v, want 2 deploys, ready p50 2s p95 4s, queue max 3s", l)
	}
	if l.EpisodesPerMin != 2 {
		t.Errorf("episodes/min = %v, want 4 over 2 minutes = 2", l.EpisodesPerMin)
	}
}

func TestMemInUse(t *testing.T) {
	n, err := MemInUse()
	if err != nil {
		t.Fatal(err)
	}
	if n <= 0 {
		t.Errorf("memory in use = %d, want more than nothing", n)
	}
	m := StartMemPeak(time.Millisecond)
	if peak := m.Stop(); peak < m.Base || peak <= 0 {
		t.Errorf("peak %d below the base %d", peak, m.Base)
	}
	m.Stop() // twice is harmless
}

package soak

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentenv/agentenv/task"
)

// Load is what a round cost the machine and how fast it went: the throughput and deploy
// figures from the runner's summary (each deploy_env step's queue_wait and ready_after
// outputs), the memory from /proc and the runner's rusage. The machine's memory is everything
// in use on it, other users included; MachineBase says what was in use when the round began.
type Load struct {
	EpisodesPerMin float64       `json:"episodes_per_min"` // finished episodes over the runner's wall time
	Deploys        int           `json:"deploys"`          // deploy_env steps that became ready
	ReadyP50       time.Duration `json:"ready_p50_ns"`     // deploy to ready, counted from admission
	ReadyP95       time.Duration `json:"ready_p95_ns"`
	QueueP50       time.Duration `json:"queue_p50_ns"` // wait for admission
	QueueMax       time.Duration `json:"queue_max_ns"`
	MachineBase    int64         `json:"machine_base_bytes"` // memory in use on the machine when the round began
	MachinePeak    int64         `json:"machine_peak_bytes"` // the most in use while it ran
	RunnerPeak     int64         `json:"runner_peak_rss_bytes"`
}

// String says l in one line.
func (l Load) String() string {
	return fmt.Sprintf("%.1f episodes/min; deploy to ready p50 %s p95 %s over %d deploys; queue wait p50 %s max %s; peak memory: machine %s (%s at the start), agentenv %s",
		l.EpisodesPerMin, round(l.ReadyP50), round(l.ReadyP95), l.Deploys, round(l.QueueP50), round(l.QueueMax),
		Bytes(l.MachinePeak), Bytes(l.MachineBase), Bytes(l.RunnerPeak))
}

func round(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }

// Bytes formats n bytes in MiB or GiB.
func Bytes(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

// deployFigures fills the deploy figures and the throughput from a runner's summary.
func (l *Load) deployFigures(sum task.Summary) {
	var ready, queued []time.Duration
	for _, ep := range sum.Episodes {
		for _, st := range ep.Steps {
			if st.Type != task.TypeDeployEnv {
				continue
			}
			r, err1 := time.ParseDuration(st.Outputs["ready_after"])
			q, err2 := time.ParseDuration(st.Outputs["queue_wait"])
			if err1 == nil && err2 == nil && r > 0 {
				ready, queued = append(ready, r), append(queued, q)
			}
		}
	}
	l.Deploys = len(ready)
	l.ReadyP50, l.ReadyP95 = Percentile(ready, 50), Percentile(ready, 95)
	l.QueueP50, l.QueueMax = Percentile(queued, 50), Percentile(queued, 100)
	if sum.Elapsed > 0 {
		l.EpisodesPerMin = float64(len(sum.Episodes)) / sum.Elapsed.Minutes()
	}
}

// Percentile returns the p-th percentile of ds by the nearest-rank method, 0 if empty.
func Percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	if len(s) == 0 {
		return 0
	}
	rank := (p*len(s) + 99) / 100 // ceil(p n / 100), 1-based
	return s[min(max(rank, 1), len(s))-1]
}

// MaxRSS returns the peak resident memory of an exited process, from its rusage; 0 if unknown.
func MaxRSS(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10 // KiB on Linux
	}
	return 0
}

// MemInUse returns the machine's memory in use (MemTotal less MemAvailable) from /proc/meminfo.
func MemInUse() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	var total, avail int64 = -1, -1
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "MemTotal":
			total = n << 10
		case "MemAvailable":
			avail = n << 10
		}
	}
	if total < 0 || avail < 0 {
		return 0, fmt.Errorf("/proc/meminfo: no MemTotal or MemAvailable")
	}
	return total - avail, nil
}

// MemPeak samples the machine's memory in use until Stop and keeps the peak.
type MemPeak struct {
	Base int64 // in use when it started

	mu   sync.Mutex
	peak int64
	stop chan struct{}
	done chan struct{}
}

// StartMemPeak starts sampling every interval.
func StartMemPeak(interval time.Duration) *MemPeak {
	m := &MemPeak{stop: make(chan struct{}), done: make(chan struct{})}
	m.Base, _ = MemInUse()
	m.peak = m.Base
	go func() {
		defer close(m.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
			if n, err := MemInUse(); err == nil {
				m.mu.Lock()
				m.peak = max(m.peak, n)
				m.mu.Unlock()
			}
		}
	}()
	return m
}

// Stop ends the sampling and returns the peak.
func (m *MemPeak) Stop() int64 {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

package bench

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentenv/agentenv/internal/atomicfile"
	"github.com/agentenv/agentenv/soak"
)

// Markers around the part of BENCHMARKS.md that a bench run rewrites.
const (
	BeginMarker = "<!-- agentenv bench: begin (written by `agentenv bench`; edit outside the markers) -->"
	EndMarker   = "<!-- agentenv bench: end -->"
)

// Markdown renders res as the section of BENCHMARKS.md between the markers (markers included).
func Markdown(res Results) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("%s\n\n", BeginMarker)
	m := res.Machine
	p("Measured %s on %d CPUs (%s), %d GiB of memory, Linux %s, Docker %s, docker compose %s, %s. The bench ran for %s.\n\n",
		res.Date.Format("2006-01-02 15:04 MST"), m.CPUs, orDash(m.CPU), m.MemGiB, orDash(m.Kernel), orDash(m.Docker), orDash(m.Compose), m.Go,
		res.Elapsed.Round(time.Second))
	p("| measure | n | median | p95 | note |\n|---|---|---|---|---|\n")
	for _, x := range res.Measures {
		note := x.Note
		if x.Skipped != "" {
			note = "skipped: " + x.Skipped
		}
		p("| %s | %d | %s | %s | %s |\n", x.Name, len(x.Samples), format(x.Median()), format(x.P95()), note)
	}
	p("\n| agentenv against the plain tool | agentenv median | baseline median | ratio |\n|---|---|---|---|\n")
	for _, c := range res.Comparisons {
		a, base := res.Measure(c.Agentenv), res.Measure(c.Baseline)
		ratio := "-"
		if r := Ratio(a, base); r > 0 {
			ratio = fmt.Sprintf("%.2f×", r)
		}
		p("| %s | %s | %s | %s |\n", c.Name, format(a.Median()), format(base.Median()), ratio)
	}
	p("\nGateway tools/call overhead (`%s`; one echo backend, real HTTP on loopback, the backend, the gateway and the proxy each in a process of its own; each session count runs direct, through the gateway, then through a plain reverse proxy, %d times; figures are medians over the runs, ranges min-max):\n\n", res.GatewayNote, GatewayRuns)
	if rows := GatewaySummary(res.Gateway); len(rows) > 0 {
		p("| sessions | per call direct / gateway (ratio, range) | p50 direct / gateway (+µs, range) | p99 direct / gateway | CPU per call, every process: direct / gateway | the gateway process per call: CPU, allocations | a plain reverse proxy instead: p50, its CPU and allocations per call |\n|---|---|---|---|---|---|---|\n")
		for _, r := range rows {
			p("| %d | %.0f / %.0f µs (%.2f×, %.2f-%.2f) | %.0f / %.0f µs (%+.0f, %.0f to %.0f) | %.0f / %.0f µs | %.0f / %.0f µs | %.0f µs, %.0f (%.1f KB) | %.0f µs, %.0f µs, %.0f |\n",
				r.Sessions, r.Direct.NsPerOp/1000, r.Gateway.NsPerOp/1000, r.PerCall.Median, r.PerCall.Min, r.PerCall.Max,
				r.Direct.P50, r.Gateway.P50, r.AddedP50.Median, r.AddedP50.Min, r.AddedP50.Max,
				r.Direct.P99, r.Gateway.P99, r.Direct.CPU, r.Gateway.CPU,
				r.Gateway.MidCPU, r.Gateway.MidAllocs, r.Gateway.MidBytes/1024,
				r.Proxy.P50, r.Proxy.MidCPU, r.Proxy.MidAllocs)
		}
	}
	o := res.Orphans
	p("\ngc after kill -9: a process created %d sandboxes (%s until all were up) and was killed with SIGKILL; `agentenv gc` removed them in %s, leaving %d.\n",
		o.Created, format(o.Create), format(o.GC), len(o.Left))
	if len(res.Load) > 0 {
		p("\nConcurrent episodes (one steady soak round of the built-in notes task each; deploy to ready counts from admission; the machine's memory is all in use on it, other users included):\n\n")
		p("| episodes | service DB | passed | episodes/min | deploy to ready p50 / p95 | queue wait p50 / max | peak memory: machine (at the start) | agentenv runner peak RSS |\n|---|---|---|---|---|---|---|---|\n")
		for _, f := range res.Load {
			where := "a container each"
			if f.Store {
				where = "a state store's database"
			}
			l := f.Load
			p("| %d | %s | %d | %.1f | %s / %s | %s / %s | %s (%s) | %s |\n", f.Episodes, where, f.Passed, l.EpisodesPerMin,
				format(l.ReadyP50), format(l.ReadyP95), format(l.QueueP50), format(l.QueueMax),
				soak.Bytes(l.MachinePeak), soak.Bytes(l.MachineBase), soak.Bytes(l.RunnerPeak))
		}
	}
	if len(res.Harbor) > 0 {
		p("\nHarbor corpus (`agentenv tasks check %s --concurrency 4`, oracle and nop per task in one run group; %s fail on purpose; builds counted from the ledger's build records made during the check):\n\n",
			HarborCorpus, strings.Join(HarborFailing(), ", "))
		p("| build cache | tasks | failing | wall | images built | builds failed |\n|---|---|---|---|---|---|\n")
		for _, f := range res.Harbor {
			p("| %s | %d | %d | %s | %d | %d |\n", f.Cache, f.Tasks, len(f.Failing), format(f.Wall), f.Builds, f.FailedBuilds)
		}
	}
	if w := res.Web; w != nil {
		p("\nThe browser sidecar: peak memory over %d navigate+snapshot pairs on each path, %d stats samples: %s as `docker stats` counts it (raw cgroup usage %s) of a %s limit. Reached straight through %s.\n",
			w.Calls, w.Samples, soak.Bytes(w.PeakMemory), soak.Bytes(w.PeakUsage), soak.Bytes(w.Limit), orDash(w.Direct))
		if len(w.Concurrency) > 0 {
			p("\n| browser deployments at once | passed | wall, deploy to teardown | deploy to ready p50 / max |\n|---|---|---|---|\n")
			for _, c := range w.Concurrency {
				r := Measure{Samples: c.Ready}
				p("| %d | %d | %s | %s / %s |\n", c.N, c.Passed, format(c.Wall), format(r.Median()), format(slices.Max(append([]time.Duration{0}, c.Ready...))))
			}
		}
	}
	if len(res.Problems) > 0 {
		p("\nProblems during this run:\n\n")
		for _, pr := range res.Problems {
			p("- %s\n", strings.ReplaceAll(pr, "\n", " "))
		}
	}
	p("\n%s\n", EndMarker)
	return b.String()
}

// GatewayRow compares the direct and the gateway path at one session count over the runs.
type GatewayRow struct {
	Sessions        int
	Direct, Gateway GatewayFigure // medians of each figure over the runs
	Proxy           GatewayFigure // the plain reverse proxy's medians, zero if it did not run
	PerCall         Spread        // gateway ns/op over direct ns/op, per run
	AddedP50        Spread        // gateway p50 minus direct p50, µs, per run
}

// Spread is the median, minimum and maximum of one figure over the runs.
type Spread struct{ Median, Min, Max float64 }

// GatewaySummary pairs the direct and gateway figures of each run at each session count, in
// the order the session counts first appear.
func GatewaySummary(figs []GatewayFigure) []GatewayRow {
	type key struct{ sessions, run int }
	direct, through, proxy := map[key]GatewayFigure{}, map[key]GatewayFigure{}, map[key]GatewayFigure{}
	var order []int
	for _, f := range figs {
		k := key{f.Sessions, f.Run}
		switch f.Path {
		case "direct":
			direct[k] = f
		case "gateway":
			through[k] = f
		case "proxy":
			proxy[k] = f
		}
		if !slices.Contains(order, f.Sessions) {
			order = append(order, f.Sessions)
		}
	}
	var rows []GatewayRow
	for _, n := range order {
		var ds, gs, ps []GatewayFigure
		var perCall, added []float64
		for k, d := range direct {
			g, ok := through[k]
			if k.sessions != n || !ok || d.NsPerOp == 0 {
				continue
			}
			ds, gs = append(ds, d), append(gs, g)
			if p, ok := proxy[k]; ok {
				ps = append(ps, p)
			}
			perCall = append(perCall, g.NsPerOp/d.NsPerOp)
			added = append(added, g.P50-d.P50)
		}
		if len(ds) == 0 {
			continue
		}
		row := GatewayRow{Sessions: n, Direct: medianFigure(ds), Gateway: medianFigure(gs),
			PerCall: spread(perCall), AddedP50: spread(added)}
		if len(ps) > 0 {
			row.Proxy = medianFigure(ps)
		}
		rows = append(rows, row)
	}
	return rows
}

// medianFigure is the figure whose every number is the median of figs'.
func medianFigure(figs []GatewayFigure) GatewayFigure {
	med := func(get func(GatewayFigure) float64) float64 {
		v := make([]float64, len(figs))
		for i, f := range figs {
			v[i] = get(f)
		}
		return spread(v).Median
	}
	return GatewayFigure{
		Path: figs[0].Path, Sessions: figs[0].Sessions,
		NsPerOp:   med(func(f GatewayFigure) float64 { return f.NsPerOp }),
		P50:       med(func(f GatewayFigure) float64 { return f.P50 }),
		P99:       med(func(f GatewayFigure) float64 { return f.P99 }),
		CPU:       med(func(f GatewayFigure) float64 { return f.CPU }),
		Bytes:     med(func(f GatewayFigure) float64 { return f.Bytes }),
		Allocs:    med(func(f GatewayFigure) float64 { return f.Allocs }),
		MidCPU:    med(func(f GatewayFigure) float64 { return f.MidCPU }),
		MidAllocs: med(func(f GatewayFigure) float64 { return f.MidAllocs }),
		MidBytes:  med(func(f GatewayFigure) float64 { return f.MidBytes }),
	}
}

// spread returns the median (the mean of the middle two for an even count), minimum and
// maximum of v, zero for none.
func spread(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := slices.Sorted(slices.Values(v))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteMarkdown replaces the section between the markers in the file at path with section, or
// appends section when the file has no markers (creating the file if needed).
func WriteMarkdown(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("write %s: %w", path, err)
	}
	s := string(old)
	i, j := strings.Index(s, BeginMarker), strings.Index(s, EndMarker)
	switch {
	case i >= 0 && j > i:
		s = s[:i] + strings.TrimSuffix(section, "\n") + s[j+len(EndMarker):]
	case s == "":
		s = "# Benchmarks\n\n" + section
	default:
		s = strings.TrimRight(s, "\n") + "\n\n" + section
	}
	if err := atomicfile.WriteBytes(path, 0o644, []byte(s)); err != nil {
		return err
	}
	return nil
}

// WriteTable prints res for people: the measures and the comparisons.
func WriteTable(w io.Writer, res Results) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tN\tMEDIAN\tP95\tNOTE")
	for _, x := range res.Measures {
		note := x.Note
		if x.Skipped != "" {
			note = "skipped: " + x.Skipped
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", x.Name, len(x.Samples), format(x.Median()), format(x.P95()), note)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "COMPARISON\tAGENTENV\tBASELINE\tRATIO")
	for _, c := range res.Comparisons {
		a, base := res.Measure(c.Agentenv), res.Measure(c.Baseline)
		ratio := "-"
		if r := Ratio(a, base); r > 0 {
			ratio = fmt.Sprintf("%.2fx", r)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, format(a.Median()), format(base.Median()), ratio)
	}
	if rows := GatewaySummary(res.Gateway); len(rows) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "GATEWAY SESSIONS\tPER CALL DIRECT/GATEWAY\tRATIO (RANGE)\tP50 DIRECT/GATEWAY\t+P50 (RANGE)\tCPU/CALL DIRECT/GATEWAY\tGATEWAY PROCESS CPU, ALLOCS/CALL")
		for _, r := range rows {
			fmt.Fprintf(tw, "%d\t%.0f/%.0f µs\t%.2fx (%.2f-%.2f)\t%.0f/%.0f µs\t%+.0f µs (%.0f to %.0f)\t%.0f/%.0f µs\t%.0f µs, %.0f\n",
				r.Sessions, r.Direct.NsPerOp/1000, r.Gateway.NsPerOp/1000, r.PerCall.Median, r.PerCall.Min, r.PerCall.Max,
				r.Direct.P50, r.Gateway.P50, r.AddedP50.Median, r.AddedP50.Min, r.AddedP50.Max,
				r.Direct.CPU, r.Gateway.CPU, r.Gateway.MidCPU, r.Gateway.MidAllocs)
		}
	}
	fmt.Fprintf(tw, "\ngc of %d orphans after kill -9: %s, %d left\n", res.Orphans.Created, format(res.Orphans.GC), len(res.Orphans.Left))
	for _, f := range res.Harbor {
		fmt.Fprintf(tw, "harbor corpus %s: %d tasks, %d failing, %s, %d images built, %d builds failed\n",
			f.Cache, f.Tasks, len(f.Failing), format(f.Wall), f.Builds, f.FailedBuilds)
	}
	if w := res.Web; w != nil {
		fmt.Fprintf(tw, "\nbrowser sidecar peak memory over %d navigate+snapshot pairs per path: %s (raw %s) of %s; direct path: %s\n",
			w.Calls, soak.Bytes(w.PeakMemory), soak.Bytes(w.PeakUsage), soak.Bytes(w.Limit), orDash(w.Direct))
		for _, c := range w.Concurrency {
			r := Measure{Samples: c.Ready}
			fmt.Fprintf(tw, "browser deployments at once: %d, %d passed, wall %s, deploy to ready p50 %s\n", c.N, c.Passed, format(c.Wall), format(r.Median()))
		}
	}
	for _, p := range res.Problems {
		fmt.Fprintf(tw, "problem: %s\n", p)
	}
	return tw.Flush()
}

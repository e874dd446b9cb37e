package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
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
	p("\nGateway tools/call overhead (`%s`; one echo backend, real HTTP on loopback):\n\n", res.GatewayNote)
	if len(res.Gateway) > 0 {
		p("| path | sessions | per call (throughput) | p50 latency | p99 latency |\n|---|---|---|---|---|\n")
		for _, g := range res.Gateway {
			p("| %s | %d | %.0f µs | %.0f µs | %.0f µs |\n", g.Path, g.Sessions, g.NsPerOp/1000, g.P50, g.P99)
		}
		for _, n := range []int{1, 64} {
			d, g := gatewayAt(res.Gateway, "direct", n), gatewayAt(res.Gateway, "gateway", n)
			if d.P50 > 0 && d.NsPerOp > 0 {
				p("\nAt %d session(s) the gateway costs %.2f× the direct p50 latency (+%.0f µs) and %.2f× the time per call.", n, g.P50/d.P50, g.P50-d.P50, g.NsPerOp/d.NsPerOp)
			}
		}
		p("\n")
	}
	o := res.Orphans
	p("\ngc after kill -9: a process created %d sandboxes (%s until all were up) and was killed with SIGKILL; `agentenv gc` removed them in %s, leaving %d.\n",
		o.Created, format(o.Create), format(o.GC), len(o.Left))
	if len(res.Problems) > 0 {
		p("\nProblems during this run:\n\n")
		for _, pr := range res.Problems {
			p("- %s\n", strings.ReplaceAll(pr, "\n", " "))
		}
	}
	p("\n%s\n", EndMarker)
	return b.String()
}

func gatewayAt(figs []GatewayFigure, path string, sessions int) GatewayFigure {
	for _, g := range figs {
		if g.Path == path && g.Sessions == sessions {
			return g
		}
	}
	return GatewayFigure{}
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
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
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
	if len(res.Gateway) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "GATEWAY PATH\tSESSIONS\tPER CALL\tP50\tP99")
		for _, g := range res.Gateway {
			fmt.Fprintf(tw, "%s\t%d\t%.0f µs\t%.0f µs\t%.0f µs\n", g.Path, g.Sessions, g.NsPerOp/1000, g.P50, g.P99)
		}
	}
	fmt.Fprintf(tw, "\ngc of %d orphans after kill -9: %s, %d left\n", res.Orphans.Created, format(res.Orphans.GC), len(res.Orphans.Left))
	for _, p := range res.Problems {
		fmt.Fprintf(tw, "problem: %s\n", p)
	}
	return tw.Flush()
}

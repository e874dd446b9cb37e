package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentenv/agentenv"
)

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows under header, aligned.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// printReceipt writes a teardown receipt for people: one line per sandbox, then a summary.
func printReceipt(w io.Writer, rc agentenv.Receipt) {
	rows := make([][]string, 0, len(rc.Items))
	for _, it := range rc.Items {
		rows = append(rows, []string{it.Record, it.Provider, string(it.Kind), string(it.Role), string(it.Outcome), it.Reason})
	}
	fmt.Fprintln(w, "teardown receipt:")
	table(w, []string{"RECORD", "PROVIDER", "KIND", "ROLE", "OUTCOME", "REASON"}, rows)
	down := rc.Count(agentenv.OutcomeTerminated) + rc.Count(agentenv.OutcomeAlreadyGone)
	var parts []string
	for _, o := range []struct {
		outcome agentenv.Outcome
		say     string
	}{
		{agentenv.OutcomeTerminated, "terminated"},
		{agentenv.OutcomeAlreadyGone, "already gone"},
		{agentenv.OutcomeFailed, "not terminated"},
		{agentenv.OutcomeStillListed, "may still be up"},
		{agentenv.OutcomeLeft, "left for gc"},
	} {
		if n := rc.Count(o.outcome); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, o.say))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing to tear down")
	}
	fmt.Fprintf(w, "%s (%s)\n", strings.Join(parts, ", "), rc.Finished.Sub(rc.Started).Round(time.Millisecond))
	if down < len(rc.Items) {
		fmt.Fprintln(w, "what is not down stays in the ledger: run `agentenv gc` to retry it")
	}
}

// ago formats t relative to now, or "-" for the zero time.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	if d < 0 {
		return "in " + (-d).Round(time.Second).String()
	}
	return d.Round(time.Second).String() + " ago"
}

// score formats an optional score for a table: "-" when there is none.
func score(s *float64) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%.3g", *s)
}

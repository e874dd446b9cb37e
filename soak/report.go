package soak

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Kind is what a round injects.
type Kind string

// Round kinds.
const (
	Steady    Kind = "steady"    // nothing injected
	Kill      Kind = "kill"      // a quarter of the episodes lose a sandbox behind agentenv's back
	Interrupt Kind = "interrupt" // the runner process receives SIGINT mid-round
	Crash     Kind = "crash"     // the runner process receives SIGKILL mid-round, then gc runs
)

// Kinds is every round kind, in the order a default soak runs them.
var Kinds = []Kind{Steady, Kill, Interrupt, Crash}

// ParseKinds parses a comma list of round kinds.
func ParseKinds(s string) ([]Kind, error) {
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(f))
		switch k {
		case Steady, Kill, Interrupt, Crash:
			out = append(out, k)
		case "":
		default:
			return nil, fmt.Errorf("round kind %q: want steady, kill, interrupt or crash", k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("round kinds %q: name at least one", s)
	}
	return out, nil
}

// Round is what one round did and what it left.
type Round struct {
	Number   int    `json:"number"` // 1-based
	Kind     Kind   `json:"kind"`
	Owner    string `json:"owner"` // agentenv.owner label of the runner process
	Episodes int    `json:"episodes"`
	// Outcomes of the episodes as the runner reported them; all zero when it printed nothing
	// (a crash round).
	Passed    int `json:"passed"`
	Failed    int `json:"failed"` // failed or scored below 1
	Cancelled int `json:"cancelled"`
	// Injected says what the round did behind agentenv's back, in order.
	Injected []string `json:"injected,omitempty"`
	// Hit holds the runs whose sandboxes a kill round removed or killed.
	Hit      []string `json:"hit,omitempty"`
	ExitCode int      `json:"exit_code"` // of the runner process; -1 if killed
	GCExit   *int     `json:"gc_exit,omitempty"`
	// Leftovers are counted from the engine, the state store and the file system after the
	// round: "container NAME", "network NAME", "volume NAME", "database NAME", "folder PATH",
	// "port N".
	Leftovers []string  `json:"leftovers"`
	Warnings  []Warning `json:"warnings"`
	// Problems are failures other than leftovers and false warnings: a wait that ran past its
	// deadline, an episode that should have passed and did not, an engine that did not answer.
	Problems []string      `json:"problems,omitempty"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Load     Load          `json:"load"`
	// Removed lists the leftovers soak removed itself after counting them.
	Removed []string `json:"removed,omitempty"`
}

// LeftoverKinds are the kinds of leftover a round counts, in the order of the table's columns:
// the first word of each of Round.Leftovers.
var LeftoverKinds = []string{"container", "network", "volume", "database", "folder", "port"}

// Count returns how many leftovers of each of LeftoverKinds the round has.
func (r Round) Count() map[string]int {
	n := make(map[string]int, len(LeftoverKinds))
	for _, l := range r.Leftovers {
		kind, _, _ := strings.Cut(l, " ")
		n[kind]++
	}
	return n
}

// Holds reports whether the round kept the promise: nothing left, no false warning, no problem.
func (r Round) Holds() bool {
	_, wrong := countWarnings(r.Warnings)
	return len(r.Leftovers) == 0 && wrong == 0 && len(r.Problems) == 0
}

// Failure says in one line why the round does not hold, or "" when it does. Problems come first:
// they are what went wrong before anything was counted.
func (r Round) Failure() string {
	var parts []string
	if len(r.Problems) > 0 {
		parts = append(parts, r.Problems[0])
	}
	if len(r.Leftovers) > 0 {
		parts = append(parts, fmt.Sprintf("%d left: %s", len(r.Leftovers), strings.Join(first(r.Leftovers, 3), ", ")))
	}
	for _, w := range r.Warnings {
		if !w.True {
			parts = append(parts, fmt.Sprintf("false warning from %s: %q on %s, which the engine no longer lists", w.Source, w.Phrase, orNone(w.Record)))
			break
		}
	}
	return strings.Join(parts, "; ")
}

func orNone(s string) string {
	if s == "" {
		return "no record"
	}
	return s
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}

// Report is a whole soak.
type Report struct {
	Episodes int           `json:"episodes"` // per round
	Rounds   []Round       `json:"rounds"`
	Holds    bool          `json:"holds"`
	First    string        `json:"first_failure,omitempty"` // "round N (kind): why"
	Elapsed  time.Duration `json:"elapsed_ns"`
}

// finish sets Holds and First from the rounds.
func (rep *Report) finish() {
	rep.Holds, rep.First = len(rep.Rounds) > 0, ""
	for _, r := range rep.Rounds {
		if !r.Holds() {
			rep.Holds = false
			if rep.First == "" {
				rep.First = fmt.Sprintf("round %d (%s): %s", r.Number, r.Kind, r.Failure())
			}
		}
	}
}

// Totals returns the leftovers, true warnings and false warnings over every round.
func (rep Report) Totals() (leftovers, truthful, wrong int) {
	for _, r := range rep.Rounds {
		t, w := countWarnings(r.Warnings)
		leftovers, truthful, wrong = leftovers+len(r.Leftovers), truthful+t, wrong+w
	}
	return
}

// Header is the column row of the per-round table.
var Header = []string{"ROUND", "KIND", "EPISODES", "PASSED", "FAILED", "CANCELLED", "INJECTED",
	"CONTAINERS", "NETWORKS", "VOLUMES", "DATABASES", "FOLDERS", "PORTS", "WARN TRUE", "WARN FALSE", "TIME", "RESULT"}

// Row is one round as a table row under Header.
func (r Round) Row() []string {
	left := r.Count()
	t, w := countWarnings(r.Warnings)
	result := "ok"
	if !r.Holds() {
		result = "FAIL: " + r.Failure()
	}
	itoa := strconv.Itoa
	row := []string{itoa(r.Number), string(r.Kind), itoa(r.Episodes), itoa(r.Passed), itoa(r.Failed), itoa(r.Cancelled),
		itoa(len(r.Injected))}
	for _, kind := range LeftoverKinds {
		row = append(row, itoa(left[kind]))
	}
	return append(row, itoa(t), itoa(w), r.Elapsed.Round(100*time.Millisecond).String(), result)
}

// WriteTable writes rounds as an aligned table with a header.
func WriteTable(w io.Writer, rounds []Round) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(Header, "\t"))
	for _, r := range rounds {
		fmt.Fprintln(tw, strings.Join(r.Row(), "\t"))
	}
	return tw.Flush()
}

// WriteText writes the report for people: the table, what each round injected, every warning
// with its verdict, every leftover, and the verdict of the soak.
func WriteText(w io.Writer, rep Report) error {
	if err := WriteTable(w, rep.Rounds); err != nil {
		return err
	}
	for _, r := range rep.Rounds {
		fmt.Fprintf(w, "round %d %s: %s\n", r.Number, r.Kind, r.Load)
		for _, in := range r.Injected {
			fmt.Fprintf(w, "round %d %s: %s\n", r.Number, r.Kind, in)
		}
		for _, wa := range r.Warnings {
			verdict := "false (the engine lists nothing under it)"
			if wa.True {
				verdict = "true (the engine lists " + strings.Join(wa.Listed, ", ") + ")"
			}
			fmt.Fprintf(w, "round %d %s: warning from %s %q on %s: %s\n", r.Number, r.Kind, wa.Source, wa.Phrase, orNone(wa.Record), verdict)
		}
		for _, l := range r.Leftovers {
			fmt.Fprintf(w, "round %d %s: left %s\n", r.Number, r.Kind, l)
		}
		for _, p := range r.Problems {
			fmt.Fprintf(w, "round %d %s: problem: %s\n", r.Number, r.Kind, p)
		}
		if len(r.Removed) > 0 {
			fmt.Fprintf(w, "round %d %s: soak removed what was left: %s\n", r.Number, r.Kind, strings.Join(r.Removed, ", "))
		}
	}
	left, truthful, wrong := rep.Totals()
	verdict := "holds"
	if !rep.Holds {
		verdict = "does not hold; first failure: " + rep.First
	}
	_, err := fmt.Fprintf(w, "soak: %d rounds of %d episodes, %d leftovers, %d true and %d false warnings; %s (%s)\n",
		len(rep.Rounds), rep.Episodes, left, truthful, wrong, verdict, rep.Elapsed.Round(100*time.Millisecond))
	return err
}

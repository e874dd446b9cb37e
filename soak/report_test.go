package soak

import (
	"bytes"
	"maps"
	"strings"
	"testing"
)

func TestParseKinds(t *testing.T) {
	tests := []struct {
		in      string
		want    []Kind
		wantErr bool
	}{
		{"steady,kill,interrupt,crash", Kinds, false},
		{" crash , steady", []Kind{Crash, Steady}, false},
		{"steady,boom", nil, true},
		{"", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseKinds(tt.in)
		if (err != nil) != tt.wantErr || strings.Join(kindStrings(got), ",") != strings.Join(kindStrings(tt.want), ",") {
			t.Errorf("ParseKinds(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func kindStrings(ks []Kind) []string {
	var out []string
	for _, k := range ks {
		out = append(out, string(k))
	}
	return out
}

func TestRoundHolds(t *testing.T) {
	tests := []struct {
		name       string
		r          Round
		holds      bool
		failureHas string
		count      map[string]int
	}{
		{"clean", Round{Warnings: []Warning{{True: true}}}, true, "", map[string]int{}},
		{"leftovers", Round{Leftovers: []string{"container a", "network b", "volume c", "folder /x", "port 1", "container d", "database agentenv-r1"}}, false,
			"7 left: container a, network b, volume c, … 4 more", map[string]int{"container": 2, "network": 1, "volume": 1, "folder": 1, "port": 1, "database": 1}},
		{"false warning", Round{Warnings: []Warning{{True: true}, {Source: "gc", Phrase: PhraseMayStillBeUp, Record: "r1"}}}, false, `false warning from gc: "may still be up" on r1`, map[string]int{}},
		{"problem first", Round{Problems: []string{"runner exited 1"}, Leftovers: []string{"container a"}}, false, "runner exited 1; 1 left: container a", map[string]int{"container": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Holds(); got != tt.holds {
				t.Errorf("Holds() = %v, want %v", got, tt.holds)
			}
			if got := tt.r.Failure(); !strings.Contains(got, tt.failureHas) || (tt.failureHas == "") != (got == "") {
				t.Errorf("Failure() = %q, want it to contain %q", got, tt.failureHas)
			}
			if got := tt.r.Count(); !maps.Equal(got, tt.count) {
				t.Errorf("Count() = %v, want %v", got, tt.count)
			}
			if row := tt.r.Row(); len(row) != len(Header) || (row[len(row)-1] == "ok") != tt.holds {
				t.Errorf("Row() = %v", row)
			}
		})
	}
}

func TestReportFirstFailure(t *testing.T) {
	rep := Report{Episodes: 4, Rounds: []Round{
		{Number: 1, Kind: Steady},
		{Number: 2, Kind: Kill, Leftovers: []string{"container x"}},
		{Number: 3, Kind: Crash, Problems: []string{"gc exited 1"}},
	}}
	rep.finish()
	if rep.Holds || rep.First != "round 2 (kill): 1 left: container x" {
		t.Errorf("finish: Holds %v, First %q", rep.Holds, rep.First)
	}
	if left, _, _ := rep.Totals(); left != 1 {
		t.Errorf("Totals leftovers = %d, want 1", left)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ROUND  KIND", "round 2 kill: left container x", "round 3 crash: problem: gc exited 1", "does not hold; first failure: round 2 (kill)"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("WriteText lacks %q:\n%s", want, buf.String())
		}
	}

	ok := Report{Rounds: []Round{{Number: 1, Kind: Steady}}}
	ok.finish()
	if !ok.Holds || ok.First != "" {
		t.Errorf("a clean report: Holds %v, First %q", ok.Holds, ok.First)
	}
	var none Report
	none.finish()
	if none.Holds {
		t.Error("a report of no rounds holds")
	}
}

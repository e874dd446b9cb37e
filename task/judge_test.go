package task

import (
	"errors"
	"testing"
)

func TestParseJudgment(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		score   float64
		reasons string
		bad     bool
	}{
		{"code block", "Here is my grade:\n```json\n{\"score\": 0.75, \"reasons\": \"mostly right\"}\n```", 0.75, "mostly right", false},
		{"bare code block", "```\n{\"score\": 1, \"reasons\": [\"a\", \"b\"]}\n```", 1, "a; b", false},
		{"bare JSON", `{"score": 0, "reason": "wrong"}`, 0, "wrong", false},
		{"JSON in text", `I think {"score": 0.5, "reasons": "half"} is fair.`, 0.5, "half", false},
		{"bare number", " 0.9\n", 0.9, "", false},
		{"refusal", "I'm sorry, but I can't help with grading this.", 0, "", true},
		{"empty", "  ", 0, "", true},
		{"malformed JSON", `{"score": "high"}`, 0, "", true},
		{"no score", `{"grade": 1}`, 0, "", true},
		{"out of range", `{"score": 7, "reasons": "great"}`, 0, "", true},
		{"negative number", "-0.1", 0, "", true},
	}
	for _, tc := range tests {
		score, reasons, err := parseJudgment(tc.text)
		if tc.bad {
			if err == nil || !errors.Is(err, errJudgeAnswer) {
				t.Errorf("%s: parseJudgment = %v, %q, %v; want an errJudgeAnswer", tc.name, score, reasons, err)
			}
			if classify(TypeJudge, err) != "infra" {
				t.Errorf("%s: a judge that gave no score must be an infra error, not a 0", tc.name)
			}
			continue
		}
		if err != nil || score != tc.score || reasons != tc.reasons {
			t.Errorf("%s: parseJudgment = %v, %q, %v; want %v, %q", tc.name, score, reasons, err, tc.score, tc.reasons)
		}
	}
}

func TestScriptReport(t *testing.T) {
	tests := []struct {
		name   string
		stdout string
		found  bool
		score  float64
		rows   int
		bad    bool
	}{
		{"whole stdout", `{"score": 0.5, "results": [{"name": "a", "passed": true}, {"name": "b", "passed": false}]}`, true, 0.5, 2, false},
		{"last line", "collected 3 tests\n...\n{\"score\": 1, \"results\": []}\n", true, 1, 0, false},
		{"no report", "3 passed in 0.1s\n", false, 0, 0, false},
		{"JSON without score", `{"ok": true}`, false, 0, 0, false},
		{"score out of range", `{"score": 2}`, false, 0, 0, true},
		{"score not a number", `{"score": "all"}`, false, 0, 0, true},
	}
	for _, tc := range tests {
		rep, found, err := scriptReport(tc.stdout)
		if (err != nil) != tc.bad || found != tc.found {
			t.Errorf("%s: scriptReport = found %v, %v; want found %v, error %v", tc.name, found, err, tc.found, tc.bad)
			continue
		}
		if found && (*rep.Score != tc.score || len(rep.rows()) != tc.rows) {
			t.Errorf("%s: score %v rows %v, want %v and %d rows", tc.name, *rep.Score, rep.rows(), tc.score, tc.rows)
		}
	}
	if got := tailBytes("abcdef", 3); got != "…def" {
		t.Errorf("tailBytes = %q", got)
	}
}

func TestComponentRecord(t *testing.T) {
	recs := []string{"net-0123456789ab", "servicedb-a1b2c3d4e5f6", "notes-ffffffffffff", "notes-db-000000000000"}
	for name, want := range map[string]string{"servicedb": "servicedb-a1b2c3d4e5f6", "notes": "notes-ffffffffffff", "notes-db": "notes-db-000000000000", "gateway": ""} {
		if got := componentRecord(recs, name); got != want {
			t.Errorf("componentRecord(%s) = %q, want %q", name, got, want)
		}
	}
}

package task

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRewardScore(t *testing.T) {
	for _, c := range []struct {
		name    string
		metrics map[string]float64
		want    float64
		wantErr bool
	}{
		{"reward.txt", map[string]float64{"reward": 1}, 1, false},
		{"reward among others", map[string]float64{"reward": 0.25, "style": 1, "speed": 1}, 0.25, false},
		{"mean without reward", map[string]float64{"a": 1, "b": 0, "c": 0.5, "d": 0.5}, 0.5, false},
		{"above 1", map[string]float64{"reward": 2}, 0, true},
		{"negative mean", map[string]float64{"a": -1, "b": 0}, 0, true},
	} {
		got, err := rewardScore(c.metrics)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("%s: rewardScore = %v, %v; want %v, error %v", c.name, got, err, c.want, c.wantErr)
		}
	}
}

func TestRewardArgv(t *testing.T) {
	r := reward{User: "tester", Env: map[string]string{"B": "2", "A": "x y"}}
	got := r.argv(90 * time.Second)
	want := []string{"timeout", "-k", "5", "90", "env", "A=x y", "B=2", "runuser", "-u", "tester", "--", "bash", "/tests/test.sh"}
	if !slices.Equal(got, want) {
		t.Errorf("argv = %q\nwant %q", got, want)
	}
	r = reward{Command: []string{"sh", "/t/run.sh"}}
	if got, want := r.argv(0), []string{"timeout", "-k", "5", "1", "sh", "/t/run.sh"}; !slices.Equal(got, want) {
		t.Errorf("argv = %q, want %q", got, want)
	}
}

func TestRewardCheck(t *testing.T) {
	for _, r := range []reward{
		{Env: map[string]string{"A=B": "1"}},
		{Dir: "relative"},
		{Dir: "/"},
		{User: "a b"},
		{Env: map[string]string{"K": "env:HOME"}},
		{Upload: []placement{{From: "tests", To: "tests"}}},
		{Upload: []placement{{From: "tests", To: "/"}}},
		{MinRewards: map[string]float64{"": 1}},
	} {
		if err := r.Check(); err == nil {
			t.Errorf("Check(%+v) = nil, want an error", r)
		}
	}
	if err := (&reward{User: "root", Env: map[string]string{"K": "v"}, Dir: "/logs/v", MinRewards: map[string]float64{"reward": 1, "style": 0.5}}).Check(); err != nil {
		t.Errorf("Check of a good reward = %v", err)
	}
}

func TestSplitReward(t *testing.T) {
	const mark = "agentenv-reward-0123"
	for _, c := range []struct {
		stdout, tests, kind, data string
		marked                    bool
	}{
		{"ok\n" + "\n" + mark + "\ntxt\n1\n", "ok\n", "txt", "1\n", true},
		{"\n" + mark + "\njson\n{\"a\": 1}", "", "json", `{"a": 1}`, true},
		{"no newline at end\n" + mark + "\nnone\n", "no newline at end", "none", "", true},
		// A test that prints a mark of its own (an old run's, say) is only output: the last
		// one is the script's.
		{"\n" + mark + "\ntxt\n1\n\n" + mark + "\ntxt\n0\n", "\n" + mark + "\ntxt\n1\n", "txt", "0\n", true},
		{"cut short", "cut short", "", "", false},
	} {
		tests, kind, data, marked := splitReward(c.stdout, mark)
		if tests != c.tests || kind != c.kind || data != c.data || marked != c.marked {
			t.Errorf("splitReward(%q) = %q, %q, %q, %v; want %q, %q, %q, %v", c.stdout, tests, kind, data, marked, c.tests, c.kind, c.data, c.marked)
		}
	}
}

func TestParseReward(t *testing.T) {
	for _, c := range []struct {
		kind, data string
		want       map[string]float64
		err        string
	}{
		{"txt", " 0.5\n", map[string]float64{"reward": 0.5}, ""},
		{"json", `{"reward": 1, "style": 0.25, "ok": true}`, map[string]float64{"reward": 1, "style": 0.25, "ok": 1}, ""},
		{"json", `{"reward": "high"}`, nil, "reward.json: reward: want a number"},
		{"json", `{}`, nil, "holds no metric"},
		{"json", `[1]`, nil, "want a JSON object"},
		{"txt", "pass", nil, "reward.txt: want a number"},
		{"none", "", nil, "the tests wrote no reward (/logs/verifier/"},
	} {
		got, err := parseReward(c.kind, c.data, "/logs/verifier")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseReward(%s, %q) = %v, %v; want an error with %q", c.kind, c.data, got, err, c.err)
			}
			continue
		}
		if err != nil || !maps.Equal(got, c.want) {
			t.Errorf("parseReward(%s, %q) = %v, %v; want %v", c.kind, c.data, got, err, c.want)
		}
	}
}

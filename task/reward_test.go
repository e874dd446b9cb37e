package task

import (
	"slices"
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
	} {
		if err := r.Check(); err == nil {
			t.Errorf("Check(%+v) = nil, want an error", r)
		}
	}
	if err := (&reward{User: "root", Env: map[string]string{"K": "v"}, Dir: "/logs/v"}).Check(); err != nil {
		t.Errorf("Check of a good reward = %v", err)
	}
}

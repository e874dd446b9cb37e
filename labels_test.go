package agentenv

import "testing"

func TestMatchLabels(t *testing.T) {
	have := map[string]string{LabelRecord: "r1", LabelRun: "", "team": "a"}
	for _, c := range []struct {
		name string
		want map[string]string
		ok   bool
	}{
		{"nothing wanted", nil, true},
		{"same value", map[string]string{LabelRecord: "r1"}, true},
		{"every key", map[string]string{LabelRecord: "r1", "team": "a"}, true},
		{"empty value present", map[string]string{LabelRun: ""}, true},
		{"other value", map[string]string{LabelRecord: "r2"}, false},
		{"missing key", map[string]string{LabelOwner: "x"}, false},
		{"missing key, empty value", map[string]string{LabelDeployment: ""}, false},
	} {
		if got := MatchLabels(have, c.want); got != c.ok {
			t.Errorf("%s: MatchLabels(%v, %v) = %v, want %v", c.name, have, c.want, got, c.ok)
		}
	}
	if MatchLabels(nil, map[string]string{"a": "b"}) {
		t.Error("MatchLabels(nil, {a:b}) = true, want false")
	}
}

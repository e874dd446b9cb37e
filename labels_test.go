package agentenv

import (
	"testing"
	"time"
)

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

func TestLabelsWithExpiry(t *testing.T) {
	exp := time.Date(2026, 12, 2, 10, 0, 0, 0, time.FixedZone("x", 3600))
	spec := SandboxSpec{Labels: map[string]string{LabelRecord: "r1"}, Expires: exp}
	got := spec.LabelsWithExpiry()
	if got[LabelRecord] != "r1" || got[LabelExpires] != "2026-12-02T09:00:00Z" {
		t.Errorf("LabelsWithExpiry = %v, want the record and the expiry in UTC", got)
	}
	got["x"] = "y"
	if _, ok := spec.Labels["x"]; ok {
		t.Error("LabelsWithExpiry returned the spec's own map, want a copy")
	}
	spec.Labels[LabelExpires] = "set"
	if got := spec.LabelsWithExpiry(); got[LabelExpires] != "set" {
		t.Errorf("LabelsWithExpiry = %v, want the label already set kept", got)
	}
	if got := (SandboxSpec{}).LabelsWithExpiry(); got == nil || len(got) != 0 {
		t.Errorf("LabelsWithExpiry of nothing = %v, want an empty map", got)
	}
}

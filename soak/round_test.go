package soak

import (
	"strings"
	"testing"
)

// TestRemoveLeftoversSaysOnlyWhatIsGone: a leftover the engine keeps through its removal is a
// problem of the round, and not listed as removed.
func TestRemoveLeftoversSaysOnlyWhatIsGone(t *testing.T) {
	labels := map[string]string{"agentenv.owner": "soak-1"}
	net := Resource{Kind: "network", ID: "net-1", Name: "net-1", Labels: labels}
	eng := &fakeEngine{res: []Resource{fakeContainer("c1", labels), net}, stuck: map[string]bool{"net-1": true}}
	s := &soaker{cfg: Config{Engine: eng}, state: t.TempDir()}
	var r Round
	s.count(&r, labels, nil)
	if len(r.Leftovers) != 2 {
		t.Fatalf("count found %v, want the container and the network", r.Leftovers)
	}
	s.removeLeftovers(&r, labels, nil)
	if len(r.Removed) != 1 || !strings.Contains(r.Removed[0], "c1") {
		t.Errorf("removed %v, want the container alone", r.Removed)
	}
	if p := strings.Join(r.Problems, "; "); !strings.Contains(p, "could not remove") || !strings.Contains(p, "net-1") {
		t.Errorf("problems %q, want the network that stayed", p)
	}
}

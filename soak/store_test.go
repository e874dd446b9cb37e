package soak

import (
	"slices"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/provider/fake"
)

// TestWithStoreCountsDatabasesButNotTemplates checks that a round's databases on a store are
// listed and removed like its containers, and that the templates and snapshots a deploy keeps on
// purpose are not.
func TestWithStoreCountsDatabasesButNotTemplates(t *testing.T) {
	owner := map[string]string{agentenv.LabelOwner: "run-1"}
	eng := &fakeEngine{res: []Resource{fakeContainer("gateway", owner)}}
	store := fake.New("state")
	create := func(name string, role agentenv.Role, ownerID string) string {
		labels := map[string]string{agentenv.LabelRecord: name, agentenv.LabelOwner: ownerID, agentenv.LabelRole: string(role)}
		sb, err := store.Create(t.Context(), agentenv.SandboxSpec{Name: name, Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	db := create("db-1", agentenv.RoleServiceDB, "run-1")
	create("tpl-1", deploy.RoleTemplate, "run-1")
	create("snap-1", deploy.RoleSnapshot, "run-1")
	create("db-other", agentenv.RoleServiceDB, "run-2")

	e := WithStore(eng, store)
	rs, err := e.List(t.Context(), owner)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.String())
	}
	if want := []string{"container gateway", "database " + db}; !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}

	if err := e.RemoveAll(t.Context(), owner); err != nil {
		t.Fatal(err)
	}
	if rs, err := e.List(t.Context(), owner); err != nil || len(rs) != 0 {
		t.Fatalf("after RemoveAll, List = %v, %v; want nothing", rs, err)
	}
	left, err := store.List(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sb := range left {
		names = append(names, sb.Labels[agentenv.LabelRecord])
	}
	slices.Sort(names)
	if want := []string{"db-other", "snap-1", "tpl-1"}; !slices.Equal(names, want) {
		t.Errorf("store keeps %v, want %v", names, want)
	}
}

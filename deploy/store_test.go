package deploy

import (
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
)

// TestStoreUnreachableFallsBackToAContainer: a store on this host's loopback that the provider's
// private networks cannot join is not used; the deploy says so and runs a service DB container.
func TestStoreUnreachableFallsBackToAContainer(t *testing.T) {
	r := newRig(t)
	var said []string
	store := &Store{Provider: "state", DSN: "postgres://agentenv:x@127.0.0.1:1/agentenv", Networks: []string{"docker"}}
	res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake", Store: store, Progress: func(e Event) {
		if e.Phase == "store" {
			said = append(said, e.Detail)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(said) != 1 || !strings.Contains(said[0], "not reachable from fake") {
		t.Errorf("progress said %q, want that the store is not reachable from fake", said)
	}
	var db []agentenv.Record
	for _, rec := range r.up(t) {
		if rec.Role == agentenv.RoleServiceDB {
			db = append(db, rec)
		}
	}
	if len(db) != 1 || db[0].Provider != "fake" {
		t.Errorf("service DB records %+v, want one container on fake", db)
	}
	if _, err := r.d.Teardown(t.Context(), res.Doc.ID); err != nil {
		t.Fatal(err)
	}
}

// TestFromSnapshotNeedsAStore: an env deployed from a store snapshot without a store it can use
// fails at the field, before anything is created.
func TestFromSnapshotNeedsAStore(t *testing.T) {
	r := newRig(t)
	snap := agentenv.Record{ID: SnapshotRecord("seeded"), Provider: "state", Role: RoleSnapshot, State: agentenv.StateLive,
		Labels: map[string]string{labelSnapshotEnv: r.env.Name}}
	if err := r.led.Put(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	_, err := r.d.Deploy(t.Context(), fromSnapshot(r.env, "seeded"), Options{Provider: "fake"})
	if err == nil || !strings.Contains(err.Error(), "service_db.from_snapshot") || !strings.Contains(err.Error(), "state store") {
		t.Fatalf("Deploy = %v, want an error naming service_db.from_snapshot and the state store", err)
	}
	for _, rec := range r.up(t) {
		if rec.ID != snap.ID {
			t.Errorf("record %s (%s) left", rec.ID, rec.Role)
		}
	}
}

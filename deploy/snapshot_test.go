package deploy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
)

// fromSnapshot returns a copy of env whose service_db.from_snapshot is name.
func fromSnapshot(env *spec.Env, name string) *spec.Env {
	e := *env
	db := *e.ServiceDB
	db.FromSnapshot = name
	e.ServiceDB = &db
	return &e
}

// restoring makes the rig's readiness restore an image snapshot into the service DB, as the
// real one does once PostgreSQL answers; nothing answers PostgreSQL on the fake.
func (r *rig) restoring() {
	r.d.ready = func(st *stack, ctx context.Context, c spec.Component, _ string) error {
		if c.Role == agentenv.RoleServiceDB {
			return st.restoreSnapshot(ctx)
		}
		return nil
	}
}

// serviceDB returns the live service DB record of deployment id.
func (r *rig) serviceDB(t *testing.T, id string) agentenv.Record {
	t.Helper()
	recs, err := r.led.List(t.Context(), agentenv.Filter{Deployment: id, States: []agentenv.State{agentenv.StateLive}})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.Role == agentenv.RoleServiceDB {
			return rec
		}
	}
	t.Fatalf("deployment %s has no live service DB", id)
	return agentenv.Record{}
}

// A container-mode deployment's service DB becomes an image snapshot holding its dump (pg_dump
// in the container), which deploys twice without a store: the service DB runs the image and its
// readiness restores the dump (psql in the container). rm-snapshot removes the image.
func TestImageSnapshotOnTheFake(t *testing.T) {
	r := newRig(t)
	r.restoring()
	src, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.fake.Calls("exec"); n != 0 {
		t.Errorf("a deploy from init files ran %d commands in its sandboxes, want none", n)
	}
	rec, err := r.d.Snapshot(t.Context(), src.Doc.ID, "seeded", nil)
	if err != nil {
		t.Fatalf("Snapshot = %v", err)
	}
	ref := rec.Attrs[agentenv.AttrImageRef]
	if rec.ID != SnapshotRecord("seeded") || rec.Kind != agentenv.KindImage || rec.Role != RoleSnapshot || rec.Provider != "fake" || ref == "" ||
		rec.Image != r.serviceDB(t, src.Doc.ID).Image || rec.Labels[labelSnapshotEnv] != r.env.Name {
		t.Errorf("snapshot record = %+v, want an image of the service DB's image on fake, labelled with the env", rec)
	}
	if got, _ := r.led.Get(t.Context(), rec.ID); !got.Owner.IsZero() || got.State != agentenv.StateLive {
		t.Errorf("snapshot record is %s owned by %v, want live and handed to its TTL", got.State, got.Owner)
	}
	if _, err := r.d.Snapshot(t.Context(), src.Doc.ID, "seeded", nil); !errors.Is(err, agentenv.ErrConflict) {
		t.Errorf("a second Snapshot of the name = %v, want ErrConflict", err)
	}
	if _, err := r.d.Teardown(t.Context(), src.Doc.ID); err != nil {
		t.Fatal(err)
	}

	env := fromSnapshot(r.env, "seeded")
	for i := range 2 {
		execs := r.fake.Calls("exec")
		res, err := r.d.Deploy(t.Context(), env, Options{Provider: "fake"})
		if err != nil {
			t.Fatalf("Deploy %d from the snapshot = %v", i, err)
		}
		db := r.serviceDB(t, res.Doc.ID)
		if db.Image != ref {
			t.Errorf("deploy %d: service DB runs %q, want the snapshot %q", i, db.Image, ref)
		}
		dump, err := r.mgr.ReadFile(t.Context(), db.ID, SnapshotDump)
		// The fake's exec prints its argv: the dump is what pg_dump printed.
		if err != nil || !strings.Contains(string(dump), "exec pg_dump ") || !strings.HasSuffix(string(dump), "--no-owner --no-privileges]") {
			t.Errorf("deploy %d: %s in the service DB = %q, %v; want what pg_dump printed", i, SnapshotDump, dump, err)
		}
		if n := r.fake.Calls("exec") - execs; n != 1 {
			t.Errorf("deploy %d ran %d commands in its sandboxes, want the one restore", i, n)
		}
		if _, err := r.d.Teardown(t.Context(), res.Doc.ID); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := r.d.RemoveSnapshot(t.Context(), "seeded")
	if err != nil || len(rc.Items) != 1 || rc.Items[0].Outcome != agentenv.OutcomeTerminated {
		t.Errorf("RemoveSnapshot = %+v, %v; want the image terminated", rc, err)
	}
	if imgs := r.fake.Images(); len(imgs) != 0 {
		t.Errorf("images after rm-snapshot: %v", imgs)
	}
	r.assertNothingLeft(t)
	if _, err := r.d.Deploy(t.Context(), env, Options{Provider: "fake"}); err == nil || !strings.Contains(err.Error(), "service_db.from_snapshot") {
		t.Errorf("Deploy from a removed snapshot = %v, want an error naming service_db.from_snapshot", err)
	}
	r.assertNothingLeft(t)
}

// A deploy from an image snapshot it cannot use fails naming the field before it creates
// anything, and so does one from a snapshot of another env or none at all.
func TestFromSnapshotRefusals(t *testing.T) {
	r := newRig(t)
	src, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := r.d.Snapshot(t.Context(), src.Doc.ID, "seeded", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.d.Teardown(t.Context(), src.Doc.ID); err != nil {
		t.Fatal(err)
	}
	other := fromSnapshot(r.env, "seeded")
	other.Name = "other"
	for _, c := range []struct {
		name string
		env  *spec.Env
		opts Options
		want string
	}{
		{"missing", fromSnapshot(r.env, "absent"), Options{Provider: "fake"}, `no snapshot "absent"`},
		{"another env", other, Options{Provider: "fake"}, `is of env "notes", not of "other"`},
		{"another provider", fromSnapshot(r.env, "seeded"), Options{Provider: "plain"}, "an image on provider fake"},
		{"vm mode", fromSnapshot(r.env, "seeded"), Options{Provider: "fake", Mode: ModeVM}, "container mode, not vm mode"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.d.Deploy(t.Context(), c.env, c.opts)
			if err == nil || !strings.Contains(err.Error(), "service_db.from_snapshot") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Deploy = %v, want an error naming service_db.from_snapshot that says %q", err, c.want)
			}
			r.assertNothingLeft(t, snap.SandboxID)
		})
	}
	if _, err := r.d.RemoveSnapshot(t.Context(), "seeded"); err != nil {
		t.Fatal(err)
	}
	r.assertNothingLeft(t)
}

// A deployment whose service DB cannot be dumped into an image is refused with the reason, and
// nothing is made: on a provider that builds no images, and in VM mode.
func TestSnapshotRefusals(t *testing.T) {
	r := newRig(t)
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Provider: "plain"}, "builds no images"},
		{Options{Provider: "fake", Mode: ModeVM}, "vm mode"},
	} {
		res, err := r.d.Deploy(t.Context(), r.env, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.d.Snapshot(t.Context(), res.Doc.ID, "seeded", nil); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Snapshot of a %s %s deployment = %v, want ErrInvalid saying %q", c.opts.Provider, res.Doc.Mode, err, c.want)
		}
		if _, err := r.led.Get(t.Context(), SnapshotRecord("seeded")); !errors.Is(err, agentenv.ErrNotFound) {
			t.Errorf("a refused snapshot left a record: %v", err)
		}
		if _, err := r.d.Teardown(t.Context(), res.Doc.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.d.Snapshot(t.Context(), "dep-absent", "Bad_Name", nil); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "snapshot name") {
		t.Errorf("Snapshot with a bad name = %v, want ErrInvalid naming it", err)
	}
	r.assertNothingLeft(t)
}

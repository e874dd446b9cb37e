//go:build integration

package deploy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/provider/docker"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// TestImageSnapshotDeployedTwiceExportsTheSame does without a store what the store's test does:
// the source's service DB is a container, its snapshot an image of it with its dump, and the
// two deployments of the snapshot run that image as their service DB. The restored tables are
// their server's (it writes) and db-mcp reads them. rm-snapshot is refused while a deployment
// runs the image (the record stays for gc's retry) and then leaves no image.
func TestImageSnapshotDeployedTwiceExportsTheSame(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	snap, snapEnv := snapshotDeployedTwice(t, r, nil)
	ref := snap.Attrs[agentenv.AttrImageRef]
	if snap.Kind != agentenv.KindImage || snap.Provider != "docker" || ref != docker.ImageRepo+":"+snap.ID || snap.Image != postgresImage {
		t.Errorf("snapshot record %+v, want an image of %s on docker", snap, postgresImage)
	}
	dockertest.CheckNoLeftovers(t, r.dc, map[string]string{agentenv.LabelRecord: snap.ID})

	id := r.name()
	res, err := r.d.Deploy(t.Context(), snapEnv, deploy.Options{Provider: "docker", Name: id})
	if err != nil {
		t.Fatal(err)
	}
	cs := envtest.Connect(t, res.GatewayURL, res.Token)
	envtest.Call(t, cs, "add_note", map[string]any{"title": "third", "body": "written on the restored table"})
	if got := envtest.Call(t, cs, "query", map[string]any{"sql": "SELECT count(*) AS n FROM notes.notes"}); !strings.Contains(got, "3") {
		t.Errorf("db-mcp count = %s, want 3: the two restored notes and one more", got)
	}
	cs.Close()
	// The engine will not remove an image a running container uses: the snapshot stays,
	// terminate_failed, and no deploy takes it any more.
	name := strings.TrimPrefix(snap.ID, "snap-")
	if rc, err := r.d.RemoveSnapshot(t.Context(), name); err == nil || rc.Count(agentenv.OutcomeFailed) != 1 || !strings.Contains(rc.Items[0].Reason, "running container") {
		t.Errorf("rm-snapshot of an image in use = %+v, %v; want it refused by the engine", rc, err)
	}
	if _, err := r.d.Deploy(t.Context(), snapEnv, deploy.Options{Provider: "docker", Name: r.name()}); err == nil || !strings.Contains(err.Error(), "service_db.from_snapshot") {
		t.Errorf("deploy of a snapshot being removed = %v, want an error at service_db.from_snapshot", err)
	}
	assertReceiptClean(t, teardown(t, r, id), false)

	rc, err := r.d.RemoveSnapshot(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	assertReceiptClean(t, rc, false)
	left, err := dockertest.Leftovers(context.Background(), r.dc, map[string]string{agentenv.LabelRecord: snap.ID})
	if err != nil || len(left) != 0 {
		t.Errorf("after rm-snapshot the engine has %v (%v), want no image", left, err)
	}
	if _, err := r.d.Deploy(t.Context(), snapEnv, deploy.Options{Provider: "docker", Name: r.name()}); err == nil || !strings.Contains(err.Error(), "service_db.from_snapshot") {
		t.Errorf("deploy of a removed snapshot = %v, want an error at service_db.from_snapshot", err)
	}
}

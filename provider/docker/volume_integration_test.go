//go:build integration

package docker_test

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/providertest"
)

// TestVolume_SharedThenRemoved: a volume is a Docker volume with the record's labels, listed by
// them; one container writes into it and another, mounting it read-only, reads what was written
// and cannot write; a mount of a volume that does not exist is ErrInvalid and makes nothing;
// the volume's Terminate, while a container that mounts it runs, tries until its context ends
// and leaves it; while that container is being removed, it waits for it and removes the volume.
func TestVolume_SharedThenRemoved(t *testing.T) {
	p, cli, image, labels := setup(t)
	ctx := t.Context()
	volID := providertest.NewID()
	vl := map[string]string{agentenv.LabelRecord: volID}
	maps.Copy(vl, labels)
	t.Cleanup(func() { p.Terminate(context.Background(), volID) })
	if _, err := p.CreateVolume(ctx, agentenv.VolumeSpec{Name: volID, Labels: vl}); err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	if _, err := p.CreateVolume(ctx, agentenv.VolumeSpec{Name: volID, Labels: vl}); !errors.Is(err, agentenv.ErrConflict) {
		t.Errorf("second CreateVolume(%s) = %v, want ErrConflict", volID, err)
	}
	res, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).Add("label", agentenv.LabelRecord+"="+volID)})
	if err != nil || len(res.Items) != 1 || res.Items[0].Name != volID || res.Items[0].Labels[testLabel] != labels[testLabel] {
		t.Fatalf("docker volume ls by the record label = %+v, %v; want the volume, with the test's labels", res.Items, err)
	}
	if sbs, err := p.List(ctx, map[string]string{agentenv.LabelRecord: volID}); err != nil || len(sbs) != 1 || sbs[0].State != agentenv.SandboxRunning {
		t.Errorf("List(record=%s) = %+v, %v; want the volume, running", volID, sbs, err)
	}

	stray := spec(image, labels, "sleep")
	stray.Mounts = []agentenv.Mount{{Volume: providertest.NewID(), Path: "/data"}}
	if _, err := p.Create(ctx, stray); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Create mounting a volume that does not exist = %v, want ErrInvalid", err)
	}
	if left, _ := dockertest.Leftovers(ctx, cli, map[string]string{agentenv.LabelRecord: stray.Name}); len(left) > 0 {
		t.Errorf("a refused mount left %v", left)
	}

	writer := spec(image, labels, "sleep")
	// At /tmp, so that the empty volume takes the image's mode there (1777), as Docker copies
	// a path's content and mode into an empty volume mounted over it: the test image's user
	// is not root.
	writer.Mounts = []agentenv.Mount{{Volume: volID, Path: "/tmp"}}
	reader := spec(image, labels, "sleep")
	reader.Mounts = []agentenv.Mount{{Volume: volID, Path: "/shared", ReadOnly: true}}
	for _, s := range []agentenv.SandboxSpec{writer, reader} {
		t.Cleanup(func() { p.Terminate(context.Background(), s.Name) })
		if _, err := p.Create(ctx, s); err != nil {
			t.Fatalf("Create(%s) mounting %s: %v", s.Name, volID, err)
		}
	}
	if r, err := p.Exec(ctx, writer.Name, []string{"/agentenv", "write", "/tmp/x.txt", "shared"}); err != nil || r.ExitCode != 0 {
		t.Fatalf("write into the volume = %+v, %v", r, err)
	}
	if r, err := p.Exec(ctx, reader.Name, []string{"/agentenv", "cat", "/shared/x.txt"}); err != nil || r.ExitCode != 0 || string(r.Stdout) != "shared" {
		t.Errorf("cat in the other container = %+v (stderr %q), %v; want %q", r, r.Stderr, err, "shared")
	}
	if r, err := p.Exec(ctx, reader.Name, []string{"/agentenv", "write", "/shared/y.txt", "no"}); err != nil || r.ExitCode == 0 {
		t.Errorf("write into the read-only mount = %+v, %v; want a failure", r, err)
	}

	// In use by a running container: tried until the context ends, and left.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = p.Terminate(short, volID)
	cancel()
	if err == nil {
		t.Errorf("Terminate(volume %s) in use by a running container = nil, want an error", volID)
	}
	if _, err := cli.VolumeInspect(ctx, volID, client.VolumeInspectOptions{}); err != nil {
		t.Errorf("the volume after a refused Terminate: %v, want it there", err)
	}
	if err := p.Terminate(ctx, reader.Name); err != nil {
		t.Fatalf("Terminate(%s): %v", reader.Name, err)
	}
	// In use by a container being removed: the volume goes once it has.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, id := range []string{writer.Name, volID} {
		wg.Go(func() { errs[i] = p.Terminate(ctx, id) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Errorf("Terminate of the writer and the volume together: %v", err)
	}
	if _, err := cli.VolumeInspect(ctx, volID, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("VolumeInspect after Terminate = %v, want not found", err)
	}
	if err := p.Terminate(ctx, volID); err != nil {
		t.Errorf("second Terminate(volume) = %v, want nil", err)
	}
}

// Package engine is what every client of a Docker engine in this module says the same way: how
// a client is made from an address, how the Engine API's errors map onto agentenv's error kinds,
// and the label filters that select what agentenv made. The docker and docker_vm providers, the
// VM emulator behind the cloud emulators, and the soak's leftover checks all use it.
package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/api/types/volume"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
)

// Client returns a client of the engine at host ($DOCKER_HOST if empty, else the default
// socket) and the address it resolved to. It does no I/O; the API version is negotiated on
// first use.
func Client(host string) (*client.Client, string, error) {
	if host == "" {
		host = os.Getenv(client.EnvOverrideHost)
	}
	if host == "" {
		host = client.DefaultDockerHost
	}
	cli, err := client.New(client.FromEnv, client.WithHost(host))
	if err != nil {
		return nil, host, fmt.Errorf("client for %s: %w: %w", host, agentenv.ErrInvalid, err)
	}
	return cli, host, nil
}

// Kind maps an Engine API error of the engine at host to an agentenv error kind, keeping the
// original in the chain: an engine that does not answer is ErrUnavailable naming host; not
// found, invalid argument and conflict are ErrNotFound, ErrInvalid and ErrConflict. An error
// that already has a kind, or has none of these, is returned as it is.
func Kind(host string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, agentenv.ErrNotFound), errors.Is(err, agentenv.ErrGone),
		errors.Is(err, agentenv.ErrInvalid), errors.Is(err, agentenv.ErrUnavailable),
		errors.Is(err, agentenv.ErrConflict):
		return err
	case client.IsErrConnectionFailed(err), cerrdefs.IsUnavailable(err):
		return fmt.Errorf("engine at %s: %w: %w", host, agentenv.ErrUnavailable, err)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %w", agentenv.ErrNotFound, err)
	case cerrdefs.IsInvalidArgument(err):
		return fmt.Errorf("%w: %w", agentenv.ErrInvalid, err)
	case cerrdefs.IsConflict(err):
		return fmt.Errorf("%w: %w", agentenv.ErrConflict, err)
	}
	return err
}

// IsGone reports whether err, from a removal, says the object is absent or already being
// removed: either way the removal counts as done.
func IsGone(err error) bool {
	return cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress")
}

// RecordFilter selects the objects that carry the record label (any record) and every one of
// labels.
func RecordFilter(labels map[string]string) client.Filters {
	f := make(client.Filters).Add("label", agentenv.LabelRecord)
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	return f
}

// IDFilter selects the objects of record id.
func IDFilter(id string) client.Filters {
	return make(client.Filters).Add("label", agentenv.LabelRecord+"="+id)
}

// LabelFilter selects the objects that carry every one of labels, agentenv's or not. It refuses
// an empty set: on a shared engine that would select everything.
func LabelFilter(labels map[string]string) (client.Filters, error) {
	if len(labels) == 0 {
		return nil, errors.New("refusing an empty label filter")
	}
	f := make(client.Filters)
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	return f, nil
}

// Listing is what an engine lists under one filter.
type Listing struct {
	Containers []container.Summary // running or not
	Networks   []network.Summary
	Volumes    []volume.Volume
	// Images are the top-level images (tagged, or untagged without children: what a build cut
	// short leaves); an image's untagged parents go with it when it is removed.
	Images []image.Summary
}

// List lists the containers (running or not), networks, volumes and images that match f, the
// four concurrently. One unreachable engine fails them all alike; the error is the first.
func List(ctx context.Context, cli *client.Client, f client.Filters) (Listing, error) {
	var (
		wg                     sync.WaitGroup
		cs                     client.ContainerListResult
		ns                     client.NetworkListResult
		vs                     client.VolumeListResult
		is                     client.ImageListResult
		cErr, nErr, vErr, iErr error
	)
	wg.Go(func() { cs, cErr = cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f}) })
	wg.Go(func() { ns, nErr = cli.NetworkList(ctx, client.NetworkListOptions{Filters: f}) })
	wg.Go(func() { vs, vErr = cli.VolumeList(ctx, client.VolumeListOptions{Filters: f}) })
	wg.Go(func() { is, iErr = cli.ImageList(ctx, client.ImageListOptions{Filters: f}) })
	wg.Wait()
	if err := cmp.Or(cErr, nErr, vErr, iErr); err != nil {
		return Listing{}, err
	}
	return Listing{Containers: cs.Items, Networks: ns.Items, Volumes: vs.Items, Images: is.Items}, nil
}

// ReadBuild drains an image build's JSON message stream (ImageBuild's body) and returns the
// first error it reports, with the last lines of output for context.
func ReadBuild(r io.Reader) error {
	msg, tail, err := readBuild(r, 5)
	if err != nil || msg == "" {
		return err
	}
	return fmt.Errorf("%s (after: %s)", msg, strings.Join(tail, " | "))
}

// ReadBuildTail is ReadBuild for a build of a user's Dockerfile, whose output says why it
// failed: the error ends with the last n lines of output (each cut at 1000 bytes), one a line.
func ReadBuildTail(r io.Reader, n int) error {
	msg, tail, err := readBuild(r, n)
	if err != nil || msg == "" {
		return err
	}
	return fmt.Errorf("%s; the build's last lines:\n  %s", msg, strings.Join(tail, "\n  "))
}

// ansi matches the terminal colour sequences a build's output carries (the builder colours a
// step's standard error).
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// readBuild drains a build's message stream: the first error it reports ("" if none) and the
// last n lines of output before it.
func readBuild(r io.Reader, n int) (string, []string, error) {
	dec := json.NewDecoder(r)
	var tail []string
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err == io.EOF {
			return "", nil, nil
		} else if err != nil {
			return "", nil, fmt.Errorf("read build output: %w", err)
		}
		text := m.Stream
		if m.ID == BuildKitTrace && m.Aux != nil {
			// BuildKit's progress: what the build's commands printed is in its logs. A trace
			// that cannot be read costs the tail its lines, not the build its result.
			if logs, err := buildKitLogs(*m.Aux); err == nil {
				text = string(logs)
			}
		}
		for _, s := range strings.Split(ansi.ReplaceAllString(text, ""), "\n") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			if len(s) > 1000 {
				s = s[:1000] + "…"
			}
			tail = append(tail, s)
			if len(tail) > n {
				tail = tail[1:]
			}
		}
		if m.Error != nil {
			return m.Error.Message, tail, nil
		}
	}
}

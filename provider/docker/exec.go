package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/filetar"
)

// maxReadFile bounds what ReadFile returns, so a mistaken path cannot exhaust memory.
const maxReadFile = 64 << 20

// Exec runs argv in the container of sandbox id and returns its exit code and output once it
// exits. It is ErrNotFound for an unknown sandbox and ErrGone for one that is not running. If
// ctx ends first, the output stream is closed and ctx's error returned; the process may run on.
func (p *Provider) Exec(ctx context.Context, id string, argv []string) (agentenv.ExecResult, error) {
	if err := checkID(id); err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("docker: exec: %w", err)
	}
	if len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("docker: exec %s: empty command: %w", id, agentenv.ErrInvalid)
	}
	res, err := engine.Exec(ctx, p.cli, p.host, id, argv)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("docker: exec %s: %w", id, err)
	}
	return res, nil
}

// WriteFile writes data (mode 0644) to the absolute path in sandbox id, creating missing parent
// directories (mode 0755). Existing directories are left as they are.
func (p *Provider) WriteFile(ctx context.Context, id, file string, data []byte) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("docker: write file: %w", err)
	}
	if !path.IsAbs(file) || path.Clean(file) == "/" {
		return fmt.Errorf("docker: write %s:%s: want an absolute file path: %w", id, file, agentenv.ErrInvalid)
	}
	file = path.Clean(file)
	// Find the deepest existing directory: the archive unpacks there, since unpacking a
	// directory entry over an existing directory would reset its mode (and /tmp is 1777).
	base := path.Dir(file)
	for base != "/" {
		_, err := p.cli.ContainerStatPath(ctx, id, client.ContainerStatPathOptions{Path: base})
		if err == nil {
			break
		}
		if !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("docker: write %s:%s: %w", id, file, engine.Kind(p.host, err))
		}
		if _, cerr := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); cerr != nil {
			return fmt.Errorf("docker: write %s:%s: %w", id, file, engine.Kind(p.host, cerr))
		}
		base = path.Dir(base)
	}
	archive, err := filetar.Pack(base, map[string][]byte{file: data})
	if err != nil {
		return fmt.Errorf("docker: write %s:%s: %w", id, file, err)
	}
	_, err = p.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: base, Content: bytes.NewReader(archive)})
	if err != nil {
		return fmt.Errorf("docker: write %s:%s: %w", id, file, engine.Kind(p.host, err))
	}
	return nil
}

// ReadFile returns the contents of the regular file at path in sandbox id. It is ErrNotFound if
// the file (or the sandbox) does not exist, and ErrInvalid for a directory.
func (p *Provider) ReadFile(ctx context.Context, id, file string) ([]byte, error) {
	if err := checkID(id); err != nil {
		return nil, fmt.Errorf("docker: read file: %w", err)
	}
	res, err := p.cli.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: file})
	if err != nil {
		return nil, fmt.Errorf("docker: read %s:%s: %w", id, file, engine.Kind(p.host, err))
	}
	defer res.Content.Close()
	data, err := engine.CopiedFile(res.Content, maxReadFile)
	if err != nil {
		return nil, fmt.Errorf("docker: read %s:%s: %w", id, file, err)
	}
	return data, nil
}

// Logs returns the last tail lines of output (stdout and stderr, interleaved as written) of
// the containers of record id, for error messages; with more than one container each block is
// headed by the container's name. tail <= 0 means all. A record without containers has no
// logs.
func (p *Provider) Logs(ctx context.Context, id string, tail int) (string, error) {
	if err := checkID(id); err != nil {
		return "", fmt.Errorf("docker: logs: %w", err)
	}
	cs, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: engine.IDFilter(id)})
	if err != nil {
		return "", fmt.Errorf("docker: logs %s: %w", id, engine.Kind(p.host, err))
	}
	t := "all"
	if tail > 0 {
		t = strconv.Itoa(tail)
	}
	var out strings.Builder
	var errs []error
	for _, c := range cs.Items {
		rc, err := p.cli.ContainerLogs(ctx, c.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: t})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var buf bytes.Buffer
		_, err = stdcopy.StdCopy(&buf, &buf, rc)
		rc.Close()
		if err != nil {
			errs = append(errs, err)
		}
		if len(cs.Items) > 1 && len(c.Names) > 0 {
			fmt.Fprintf(&out, "==> %s <==\n", strings.TrimPrefix(c.Names[0], "/"))
		}
		out.Write(buf.Bytes())
	}
	if err := errors.Join(errs...); err != nil {
		return out.String(), fmt.Errorf("docker: logs %s: %w", id, engine.Kind(p.host, err))
	}
	return out.String(), nil
}

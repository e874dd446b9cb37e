package dockervm

import (
	"bytes"
	"context"
	"fmt"
	"path"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/filetar"
)

// maxReadFile bounds what ReadFile returns, so a mistaken path cannot exhaust memory.
const maxReadFile = 64 << 20

var (
	_ agentenv.Execer = (*Provider)(nil)
	_ agentenv.Files  = (*Provider)(nil)
)

// mainOf returns a client of the inner engine of VM id and the name of its main container: a
// VM made by Create. A VM that does not exist is ErrNotFound, one that is not running ErrGone,
// and one made by CreateVM (a stack's, with no main container) ErrInvalid. The caller closes
// the client.
func (p *Provider) mainOf(ctx context.Context, id string) (*client.Client, string, error) {
	if err := checkName("sandbox id", id); err != nil {
		return nil, "", err
	}
	res, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, "", fmt.Errorf("no vm %s: %w", id, agentenv.ErrNotFound)
		}
		return nil, "", engine.Kind(p.host, ctxerr.Prefer(ctx, err))
	}
	c := res.Container
	if c.Config == nil || c.Config.Labels[agentenv.LabelRecord] != id {
		return nil, "", fmt.Errorf("%s is not an agentenv vm: %w", id, agentenv.ErrInvalid)
	}
	main := c.Config.Labels[labelMain]
	if main == "" {
		return nil, "", fmt.Errorf("vm %s hosts a stack and has no main container: %w", id, agentenv.ErrInvalid)
	}
	if c.State == nil || !c.State.Running {
		return nil, "", fmt.Errorf("vm %s is not running: %w", id, agentenv.ErrGone)
	}
	in, err := p.inner(id)
	if err != nil {
		return nil, "", err
	}
	return in, main, nil
}

// Exec implements agentenv.Execer for a sandbox made by Create: it runs argv in the VM's main
// container, through the inner engine, and returns its exit code and output once it exits. It
// is ErrNotFound for an unknown sandbox and ErrGone for one that is not running. If ctx ends
// first, the output stream is closed and ctx's error returned; the process may run on.
func (p *Provider) Exec(ctx context.Context, id string, argv []string) (agentenv.ExecResult, error) {
	if len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("docker_vm: exec %s: empty command: %w", id, agentenv.ErrInvalid)
	}
	in, main, err := p.mainOf(ctx, id)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("docker_vm: exec %s: %w", id, err)
	}
	defer in.Close()
	res, err := engine.Exec(ctx, in, p.host, main, argv)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("docker_vm: exec %s: %w", id, err)
	}
	return res, nil
}

// WriteFile implements agentenv.Files for a sandbox made by Create: it writes data (mode
// 0644) to the absolute path in the VM's main container, creating missing parent directories
// (mode 0755) and leaving existing ones as they are.
func (p *Provider) WriteFile(ctx context.Context, id, file string, data []byte) error {
	if !path.IsAbs(file) || path.Clean(file) == "/" {
		return fmt.Errorf("docker_vm: write %s:%s: want an absolute file path: %w", id, file, agentenv.ErrInvalid)
	}
	file = path.Clean(file)
	in, main, err := p.mainOf(ctx, id)
	if err != nil {
		return fmt.Errorf("docker_vm: write %s:%s: %w", id, file, err)
	}
	defer in.Close()
	// Unpack at the deepest existing directory: a directory entry unpacked over an existing
	// directory would reset its mode (and /tmp is 1777).
	base := path.Dir(file)
	for base != "/" {
		_, err := in.ContainerStatPath(ctx, main, client.ContainerStatPathOptions{Path: base})
		if err == nil {
			break
		}
		if !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("docker_vm: write %s:%s: %w", id, file, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
		}
		base = path.Dir(base)
	}
	archive, err := filetar.Pack(base, map[string][]byte{file: data})
	if err != nil {
		return fmt.Errorf("docker_vm: write %s:%s: %w", id, file, err)
	}
	if _, err := in.CopyToContainer(ctx, main, client.CopyToContainerOptions{DestinationPath: base, Content: bytes.NewReader(archive)}); err != nil {
		return fmt.Errorf("docker_vm: write %s:%s: %w", id, file, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	return nil
}

// ReadFile implements agentenv.Files for a sandbox made by Create: the contents of the regular
// file at path in the VM's main container. It is ErrNotFound if the file (or the sandbox) does
// not exist, and ErrInvalid for a directory.
func (p *Provider) ReadFile(ctx context.Context, id, file string) ([]byte, error) {
	in, main, err := p.mainOf(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("docker_vm: read %s:%s: %w", id, file, err)
	}
	defer in.Close()
	res, err := in.CopyFromContainer(ctx, main, client.CopyFromContainerOptions{SourcePath: file})
	if err != nil {
		return nil, fmt.Errorf("docker_vm: read %s:%s: %w", id, file, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	defer res.Content.Close()
	data, err := engine.CopiedFile(res.Content, maxReadFile)
	if err != nil {
		return nil, fmt.Errorf("docker_vm: read %s:%s: %w", id, file, err)
	}
	return data, nil
}

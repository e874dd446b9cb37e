package e2b

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/shellquote"
)

// stdinChunk is how much base64 of a command's stdin one process request carries: under
// Linux's 128 KiB limit on one argument, and a multiple of 4 so each chunk decodes alone.
const stdinChunk = 96 << 10

var _ agentenv.VMExecer = (*Provider)(nil)

// ExecInVM implements agentenv.VMExecer with `docker exec` through the process API (as root).
// envd's Start request has no stdin, so stdin is written to a file in the VM first, in chunks
// of base64, and removed afterwards. A container that does not exist is ErrNotFound; a VM that
// is gone, ErrGone.
func (p *Provider) ExecInVM(ctx context.Context, vm, name string, argv []string, env map[string]string, stdin []byte) (agentenv.ExecResult, error) {
	if !recordName.MatchString(name) || len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("e2b: exec in %s of %s: want a container name and a command: %w", vm, name, agentenv.ErrInvalid)
	}
	d, err := p.detail(ctx, vm)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("e2b: exec in %s of %s: %w", vm, name, err)
	}
	run := func(ctx context.Context, script string) (agentenv.ExecResult, error) {
		return p.process(ctx, vm, d.EnvdAccessToken, processConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}, "root", "", true)
	}
	args := []string{"docker", "exec"}
	if stdin != nil {
		args = append(args, "-i")
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		args = append(args, "-e", k+"="+env[k])
	}
	args = append(append(args, name), argv...)
	script := shellquote.Join(args) + " </dev/null"
	if stdin != nil {
		file := "/tmp/agentenv-stdin-" + rand.Text()
		defer func() {
			cctx, cancel := cleanup.Context(ctx, p.cfg.RequestTimeout)
			defer cancel()
			if _, err := run(cctx, "rm -f "+file); err != nil && !errors.Is(err, agentenv.ErrGone) {
				p.log.Warn("remove a command's stdin file in the vm; it goes with the vm", "vm", vm, "file", file, "err", err)
			}
		}()
		enc := base64.StdEncoding.EncodeToString(stdin)
		for len(enc) > stdinChunk {
			res, err := run(ctx, "printf %s '"+enc[:stdinChunk]+"' | base64 -d >> "+file)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("write stdin: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
			}
			if err != nil {
				return agentenv.ExecResult{}, fmt.Errorf("e2b: exec in %s of %s: %w", vm, name, err)
			}
			enc = enc[stdinChunk:]
		}
		script = "printf %s '" + enc + "' | base64 -d >> " + file + " && " + shellquote.Join(args) + " <" + file
	}
	res, err := run(ctx, script)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("e2b: exec in %s of %s: %w", vm, name, err)
	}
	if res.ExitCode != 0 && strings.Contains(string(res.Stderr), "No such container") {
		return res, fmt.Errorf("e2b: exec in %s: no container %s: %w", vm, name, agentenv.ErrNotFound)
	}
	return res, nil
}

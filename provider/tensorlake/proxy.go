package tensorlake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
	"github.com/agentenv/agentenv/internal/ctxerr"
)

// The sandbox API's process statuses.
const (
	procRunning  = "running"
	procSignaled = "signaled"
)

// startProcess is the body of POST /api/v1/processes (StartProcessRequest).
type startProcess struct {
	Command    string            `json:"command"`
	Args       []string          `json:"args,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
	StdinMode  string            `json:"stdin_mode,omitempty"`
	StdoutMode string            `json:"stdout_mode,omitempty"`
	StderrMode string            `json:"stderr_mode,omitempty"`
}

// processInfo is ProcessInfo.
type processInfo struct {
	PID      int    `json:"pid"`
	Status   string `json:"status"`
	ExitCode *int   `json:"exit_code"`
	Signal   *int   `json:"signal"`
}

// outputResponse is the answer of GET /api/v1/processes/{pid}/stdout (and stderr).
type outputResponse struct {
	Lines []string `json:"lines"`
}

// api is the base URL of sandbox id's own API.
func (p *Provider) api(id string) string {
	return strings.TrimRight(p.cfg.ProxyURL(id), "/") + "/api/v1"
}

// sandboxErr maps an error of sandbox id's own API: a sandbox the API does not know (404 with
// no process or file in question, 502/503 from the proxy of an ended one) is told apart by
// asking the management API, so that a command in a terminated sandbox is ErrGone.
func (p *Provider) sandboxErr(ctx context.Context, id string, err error) error {
	if st := apierr.Status(err); st == http.StatusNotFound || st == http.StatusBadGateway || st == http.StatusServiceUnavailable {
		si, ierr := p.info(ctx, id)
		switch {
		case errors.Is(ierr, agentenv.ErrNotFound):
			return fmt.Errorf("%w: %w: %w", agentenv.ErrNotFound, agentenv.ErrGone, err)
		case ierr == nil && finished(si.Status):
			return fmt.Errorf("sandbox %s: %w: %w", si.Status, agentenv.ErrGone, err)
		}
	}
	return kind(err)
}

// run starts argv in sandbox id through the process API, waits for it to end (polling its
// status, as the SDKs' run does) and returns its exit code and captured output. The process API
// captures output as lines: the output returned is those lines, each ended by a newline. A
// process killed by a signal has exit code 128+signal.
func (p *Provider) run(ctx context.Context, id string, argv []string) (agentenv.ExecResult, error) {
	req := startProcess{Command: argv[0], Args: argv[1:], StdinMode: "closed", StdoutMode: "capture", StderrMode: "capture"}
	var proc processInfo
	if err := p.call(ctx, http.MethodPost, p.api(id)+"/processes", req, &proc); err != nil {
		return agentenv.ExecResult{}, p.sandboxErr(ctx, id, err)
	}
	base := p.api(id) + "/processes/" + strconv.Itoa(proc.PID)
	wait := 20 * time.Millisecond
	for proc.Status == procRunning || proc.Status == "" {
		select {
		case <-ctx.Done():
			return agentenv.ExecResult{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
		if err := p.call(ctx, http.MethodGet, base, nil, &proc); err != nil {
			return agentenv.ExecResult{}, ctxerr.Prefer(ctx, p.sandboxErr(ctx, id, err))
		}
	}
	res := agentenv.ExecResult{ExitCode: -1}
	switch {
	case proc.ExitCode != nil:
		res.ExitCode = *proc.ExitCode
	case proc.Status == procSignaled && proc.Signal != nil:
		res.ExitCode = 128 + *proc.Signal
	}
	for stream, dst := range map[string]*[]byte{"stdout": &res.Stdout, "stderr": &res.Stderr} {
		var out outputResponse
		if err := p.call(ctx, http.MethodGet, base+"/"+stream, nil, &out); err != nil {
			return agentenv.ExecResult{}, fmt.Errorf("read %s: %w", stream, p.sandboxErr(ctx, id, err))
		}
		var b bytes.Buffer
		for _, l := range out.Lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		*dst = b.Bytes()
	}
	return res, nil
}

// Exec implements agentenv.Execer through the sandbox's process API. A sandbox that has ended
// is ErrGone; one Tensorlake does not know, ErrNotFound.
func (p *Provider) Exec(ctx context.Context, id string, argv []string) (agentenv.ExecResult, error) {
	if len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("tensorlake: exec in %s: empty command: %w", id, agentenv.ErrInvalid)
	}
	res, err := p.run(ctx, id, argv)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("tensorlake: exec in %s: %w", id, err)
	}
	return res, nil
}

// WriteFile implements agentenv.Files with PUT /api/v1/files?path=P (the sandbox API creates the
// parent directories).
func (p *Provider) WriteFile(ctx context.Context, id, path string, data []byte) error {
	if err := p.put(ctx, id, path, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("tensorlake: write %s in %s: %w", path, id, err)
	}
	return nil
}

// put streams body into path of sandbox id.
func (p *Provider) put(ctx context.Context, id, path string, body io.Reader) error {
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("path %q: want an absolute path: %w", path, agentenv.ErrInvalid)
	}
	resp, err := p.do(ctx, http.MethodPut, p.api(id)+"/files?path="+url.QueryEscape(path), body, "application/octet-stream")
	if err != nil {
		return p.sandboxErr(ctx, id, err)
	}
	resp.Body.Close()
	return nil
}

// maxFile bounds a file read into memory.
const maxFile = 256 << 20

// ReadFile implements agentenv.Files with GET /api/v1/files?path=P; a missing file is
// ErrNotFound.
func (p *Provider) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("tensorlake: read %s in %s: want an absolute path: %w", path, id, agentenv.ErrInvalid)
	}
	resp, err := p.do(ctx, http.MethodGet, p.api(id)+"/files?path="+url.QueryEscape(path), nil, "")
	if err != nil {
		if apierr.Status(err) == http.StatusNotFound {
			if si, ierr := p.info(ctx, id); ierr == nil && !finished(si.Status) {
				return nil, fmt.Errorf("tensorlake: read %s in %s: no such file: %w", path, id, agentenv.ErrNotFound)
			}
		}
		return nil, fmt.Errorf("tensorlake: read %s in %s: %w", path, id, p.sandboxErr(ctx, id, err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxFile+1))
	if err == nil && len(b) > maxFile {
		err = fmt.Errorf("larger than %d bytes: %w", maxFile, agentenv.ErrInvalid)
	}
	if err != nil {
		return nil, fmt.Errorf("tensorlake: read %s in %s: %w", path, id, err)
	}
	return b, nil
}

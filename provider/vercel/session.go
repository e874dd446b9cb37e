package vercel

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/cloudapi"
)

// sessionPath is the base of session id's API.
func sessionPath(id string) string { return "/v2/sandboxes/sessions/" + url.PathEscape(id) }

// commandRequest is the body of POST .../cmd.
type commandRequest struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env"`
	Sudo    bool              `json:"sudo"`
	Wait    bool              `json:"wait,omitempty"`
}

// startCommand starts req detached in session and returns it as Vercel answered.
func (p *Provider) startCommand(ctx context.Context, session string, req commandRequest) (commandInfo, error) {
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	if req.Args == nil {
		req.Args = []string{}
	}
	var out struct {
		Command commandInfo `json:"command"`
	}
	if err := p.call(ctx, http.MethodPost, sessionPath(session)+"/cmd", nil, req, &out); err != nil {
		return commandInfo{}, kind(err)
	}
	if out.Command.ID == "" {
		return commandInfo{}, fmt.Errorf("command answered no id")
	}
	return out.Command, nil
}

// maxOutput bounds the output of one command kept in memory.
const maxOutput = 64 << 20

// runCommand runs req in session and waits for it: POST .../cmd with wait, whose answer is an
// application/x-ndjson stream of the command, its log lines and the finished command. If ctx ends
// first the command is killed (best effort) and ctx's error returned.
func (p *Provider) runCommand(ctx context.Context, session string, req commandRequest) (agentenv.ExecResult, error) {
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	if req.Args == nil {
		req.Args = []string{}
	}
	req.Wait = true
	b, err := json.Marshal(req)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("encode command: %w", err)
	}
	resp, err := p.do(ctx, p.api, http.MethodPost, sessionPath(session)+"/cmd", bytes.NewReader(b), "application/json")
	if err != nil {
		return agentenv.ExecResult{}, kind(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-ndjson") {
		return agentenv.ExecResult{}, fmt.Errorf("command answered %q, want a stream of command data (application/x-ndjson)", ct)
	}
	var (
		res     agentenv.ExecResult
		started string
	)
	dec := json.NewDecoder(io.LimitReader(resp.Body, 2*maxOutput))
	for {
		var line struct {
			Command *commandInfo    `json:"command"`
			Stream  string          `json:"stream"`
			Data    json.RawMessage `json:"data"`
		}
		if err := dec.Decode(&line); err != nil {
			if ctx.Err() != nil {
				p.killCommand(ctx, session, started)
				return agentenv.ExecResult{}, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return agentenv.ExecResult{}, fmt.Errorf("command stream ended before the command finished: %w", err)
		}
		switch {
		case line.Command != nil && started == "":
			started = line.Command.ID
		case line.Command != nil:
			if line.Command.ExitCode == nil {
				return res, fmt.Errorf("command %s finished with no exit code", line.Command.ID)
			}
			res.ExitCode = *line.Command.ExitCode
			return res, nil
		case line.Stream == "stdout" || line.Stream == "stderr":
			var data string
			if err := json.Unmarshal(line.Data, &data); err != nil {
				return res, fmt.Errorf("command log line: %w", err)
			}
			if line.Stream == "stdout" {
				res.Stdout = append(res.Stdout, data...)
			} else {
				res.Stderr = append(res.Stderr, data...)
			}
		case line.Stream == "error":
			var e struct{ Code, Message string }
			json.Unmarshal(line.Data, &e)
			err := fmt.Errorf("command stream: %s (%s)", e.Message, e.Code)
			if e.Code == "sandbox_stopped" {
				err = fmt.Errorf("%w: %w", err, agentenv.ErrGone)
			}
			return res, err
		}
	}
}

// killCommand kills command id of session with SIGKILL on a cleanup context, best effort.
func (p *Provider) killCommand(ctx context.Context, session, id string) {
	if id == "" {
		return
	}
	cctx, cancel := cleanup.Context(ctx, p.cfg.RequestTimeout)
	defer cancel()
	if err := p.call(cctx, http.MethodPost, sessionPath(session)+"/cmd/"+url.PathEscape(id)+"/kill", nil, map[string]int{"signal": 9}, nil); err != nil {
		p.log.Debug("kill a command whose caller gave up", "session_id", session, "command_id", id, "err", err)
	}
}

// running returns the session of sandbox name while it runs: ErrNotFound for a sandbox Vercel
// does not know, ErrGone for one whose session has stopped.
func (p *Provider) running(ctx context.Context, name string) (described, error) {
	d, err := p.describe(ctx, name)
	if err != nil {
		return described{}, err
	}
	if d.Session.Status != statusRunning {
		return d, fmt.Errorf("sandbox %s is %s: %w", name, d.Session.Status, agentenv.ErrGone)
	}
	return d, nil
}

// Exec implements agentenv.Execer: argv runs as a command of the sandbox's session, as its
// default user, and Exec waits for it.
func (p *Provider) Exec(ctx context.Context, name string, argv []string) (agentenv.ExecResult, error) {
	if len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("vercel: exec in %s: empty command: %w", name, agentenv.ErrInvalid)
	}
	d, err := p.running(ctx, name)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("vercel: exec in %s: %w", name, err)
	}
	res, err := p.runCommand(ctx, d.Session.ID, commandRequest{Command: argv[0], Args: argv[1:]})
	if err != nil {
		return res, fmt.Errorf("vercel: exec in %s: %w", name, err)
	}
	return res, nil
}

// file is one file of a write.
type file struct {
	name string // absolute path in the sandbox
	data []byte
	mode int64
}

// writeFiles writes files into session: POST .../fs/write with a gzipped tar of them (and of
// their parent directories), extracted at / (the x-cwd header), as the SDK's writeFiles sends it.
func (p *Provider) writeFiles(ctx context.Context, session string, files []file) error {
	var buf bytes.Buffer
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	tb := newTarball(&buf)
	for _, f := range files {
		if err := tb.add(f.name, f.mode, int64(len(f.data)), bytes.NewReader(f.data)); err != nil {
			return err
		}
	}
	if err := tb.close(); err != nil {
		return err
	}
	return p.postTarball(ctx, session, &buf)
}

// tarball writes a gzipped tar of files at absolute paths, each preceded by its parent
// directories.
type tarball struct {
	zw   *gzip.Writer
	tw   *tar.Writer
	dirs map[string]bool
}

func newTarball(w io.Writer) *tarball {
	zw := gzip.NewWriter(w)
	return &tarball{zw: zw, tw: tar.NewWriter(zw), dirs: map[string]bool{}}
}

// add writes the file name of size bytes read from r, with mode.
func (t *tarball) add(name string, mode, size int64, r io.Reader) error {
	now := time.Now()
	for _, d := range parents(name) {
		if !t.dirs[d] {
			t.dirs[d] = true
			if err := t.tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now}); err != nil {
				return err
			}
		}
	}
	if err := t.tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(path.Clean(name), "/"), Typeflag: tar.TypeReg, Mode: mode, Size: size, ModTime: now}); err != nil {
		return err
	}
	_, err := io.Copy(t.tw, r)
	return err
}

func (t *tarball) close() error {
	if err := t.tw.Close(); err != nil {
		return err
	}
	return t.zw.Close()
}

// postTarball posts a gzipped tar to session's fs/write, extracted at /.
func (p *Provider) postTarball(ctx context.Context, session string, body io.Reader) error {
	resp, err := p.do(ctx, p.files, http.MethodPost, sessionPath(session)+"/fs/write", body, "application/gzip")
	if err != nil {
		return kind(err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, cloudapi.MaxAnswer))
	return resp.Body.Close()
}

// parents returns the directories above the absolute path name, outermost first, relative to /.
func parents(name string) []string {
	var out []string
	for d := path.Dir(path.Clean(name)); d != "/" && d != "."; d = path.Dir(d) {
		out = append([]string{strings.TrimPrefix(d, "/")}, out...)
	}
	return out
}

// WriteFile implements agentenv.Files: data goes to the absolute path name in the sandbox (mode
// 0644, parent directories made), as the sandbox's default user.
func (p *Provider) WriteFile(ctx context.Context, name, dst string, data []byte) error {
	if !path.IsAbs(dst) {
		return fmt.Errorf("vercel: write %s in %s: want an absolute path: %w", dst, name, agentenv.ErrInvalid)
	}
	d, err := p.running(ctx, name)
	if err == nil {
		err = p.writeFiles(ctx, d.Session.ID, []file{{name: dst, data: data, mode: 0o644}})
	}
	if err != nil {
		return fmt.Errorf("vercel: write %s in %s: %w", dst, name, err)
	}
	return nil
}

// ReadFile implements agentenv.Files: POST .../fs/read; a missing file is ErrNotFound.
func (p *Provider) ReadFile(ctx context.Context, name, src string) ([]byte, error) {
	d, err := p.running(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("vercel: read %s in %s: %w", src, name, err)
	}
	b, err := json.Marshal(map[string]string{"path": src})
	if err != nil {
		return nil, err
	}
	resp, err := p.do(ctx, p.api, http.MethodPost, sessionPath(d.Session.ID)+"/fs/read", bytes.NewReader(b), "application/json")
	if err != nil {
		return nil, fmt.Errorf("vercel: read %s in %s: %w", src, name, kind(err))
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "application/octet-stream") {
		return nil, fmt.Errorf("vercel: read %s in %s: answered %q, want application/octet-stream", src, name, ct)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxOutput+1))
	if err != nil {
		return nil, fmt.Errorf("vercel: read %s in %s: %w", src, name, err)
	}
	if len(data) > maxOutput {
		return nil, fmt.Errorf("vercel: read %s in %s: larger than %d bytes: %w", src, name, maxOutput, agentenv.ErrInvalid)
	}
	return data, nil
}

// putFile writes what r reads to the absolute path name in session, of any size: it is spooled
// to a temporary file first (a tar entry needs its size), then streamed as one gzipped tar.
func (p *Provider) putFile(ctx context.Context, session, name string, r io.Reader) error {
	tmp, err := os.CreateTemp("", "agentenv-vercel-upload-*")
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	size, err := io.Copy(tmp, r)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	pr, pw := io.Pipe()
	go func() {
		tb := newTarball(pw)
		err := tb.add(name, 0o644, size, tmp)
		if err == nil {
			err = tb.close()
		}
		pw.CloseWithError(err)
	}()
	err = p.postTarball(ctx, session, pr)
	pr.CloseWithError(err)
	return err
}

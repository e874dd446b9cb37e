// Package process is the provider for hosts without a container engine: a sandbox is a work
// folder, and, when the spec has a command, a process group started in it. It isolates nothing;
// it exists so that `agentenv run hello` works on a fresh machine and so that envs made only of
// local binaries can run without Docker. Teardown kills the process group and removes the folder;
// gc finds folders by the labels kept in each folder's sandbox.json.
package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/procinfo"
)

// Config configures the provider.
type Config struct {
	Name      string        // "process" if empty
	Root      string        // where work folders live; required
	StopGrace time.Duration // SIGTERM to SIGKILL; 1 s if zero
}

// Provider runs sandboxes as work folders and process groups on this host.
type Provider struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	children map[string]chan struct{} // by sandbox: closed once its exit code is on disk
}

var (
	_ agentenv.Provider = (*Provider)(nil)
	_ agentenv.Execer   = (*Provider)(nil)
	_ agentenv.Files    = (*Provider)(nil)
)

// metaFile is the file in each work folder that carries the sandbox's labels and process;
// exitFile holds the exit code of its process once it has exited.
const (
	metaFile = "sandbox.json"
	exitFile = "sandbox.exit"
)

// meta is what metaFile holds.
type meta struct {
	Name    string            `json:"name"`
	Labels  map[string]string `json:"labels"`
	PID     int               `json:"pid,omitempty"`
	Start   int64             `json:"start,omitempty"` // process start, clock ticks since boot
	Created time.Time         `json:"created"`
	Ports   []int             `json:"ports,omitempty"`
}

// New returns a provider for cfg. It creates cfg.Root if needed.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = "process"
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = time.Second
	}
	if cfg.Root == "" {
		return nil, fmt.Errorf("process: no root folder: %w", agentenv.ErrInvalid)
	}
	// A root that cannot hold folders fails every create after its record is written, and gc
	// could not list what it holds: refused here, before any record.
	if fi, err := os.Stat(cfg.Root); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("process: root %s is not a folder: %w", cfg.Root, agentenv.ErrInvalid)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Provider{cfg: cfg, log: logger, children: map[string]chan struct{}{}}, nil
}

// Name implements agentenv.Provider.
func (p *Provider) Name() string { return p.cfg.Name }

// Root returns the folder that holds the work folders.
func (p *Provider) Root() string { return p.cfg.Root }

// Capabilities implements agentenv.Provider.
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{OnThisMachine: true, ListByLabel: true}
}

// Dir returns the work folder of sandbox id.
func (p *Provider) Dir(id string) string { return filepath.Join(p.cfg.Root, id) }

// Create implements agentenv.Provider. The image must be empty or "host": the process runs
// whatever is on this machine.
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if err := validName(spec.Name); err != nil || spec.Labels[agentenv.LabelRecord] != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("process: create %q: name must be a record id carried in the record label: %w", spec.Name, agentenv.ErrInvalid)
	}
	if spec.Image != "" && spec.Image != "host" {
		return agentenv.Sandbox{}, fmt.Errorf("process: create %s: image %q: the process provider runs no images (use \"host\" or none): %w", spec.Name, spec.Image, agentenv.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("process: create %s: %w", spec.Name, err)
	}
	dir := p.Dir(spec.Name)
	if err := os.MkdirAll(p.cfg.Root, 0o700); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("process: create %s: %w", spec.Name, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("process: create %s: %w", spec.Name, err)
	}
	m := meta{Name: spec.Name, Labels: maps.Clone(spec.Labels), Created: time.Now().UTC(), Ports: spec.Ports}
	// Labels go to disk before any process starts, so that List finds the folder from now on.
	if err := writeMeta(dir, m); err != nil {
		os.RemoveAll(dir)
		return agentenv.Sandbox{}, fmt.Errorf("process: create %s: %w", spec.Name, err)
	}
	for file, data := range spec.Files {
		if err := p.WriteFile(ctx, spec.Name, file, data); err != nil {
			os.RemoveAll(dir)
			return agentenv.Sandbox{}, fmt.Errorf("process: create %s: %w", spec.Name, err)
		}
	}
	if len(spec.Command) > 0 {
		pid, start, err := p.start(dir, spec)
		if err != nil {
			os.RemoveAll(dir)
			return agentenv.Sandbox{}, fmt.Errorf("process: create %s: %w", spec.Name, err)
		}
		m.PID, m.Start = pid, start
		if err := writeMeta(dir, m); err != nil {
			p.kill(m)
			os.RemoveAll(dir)
			return agentenv.Sandbox{}, fmt.Errorf("process: create %s: %w", spec.Name, err)
		}
	}
	return p.sandbox(m), nil
}

// start launches spec.Command in its own process group in dir.
func (p *Provider) start(dir string, spec agentenv.SandboxSpec) (int, int64, error) {
	logf, err := os.Create(filepath.Join(dir, "output.log"))
	if err != nil {
		return 0, 0, err
	}
	defer logf.Close()
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	cmd.Dir = dir
	if spec.WorkDir != "" {
		cmd.Dir = filepath.Join(dir, spec.WorkDir)
	}
	cmd.Env = os.Environ()
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "AGENTENV_SANDBOX_DIR="+dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("start %s: %w", spec.Command[0], err)
	}
	pid := cmd.Process.Pid
	start, _ := procinfo.Start(pid) // 0 (unknown) if it already exited
	// Reap the child when it exits, so it does not linger as a zombie of this process, and
	// keep its exit code beside it while this process lives to see it.
	exited := make(chan struct{})
	p.mu.Lock()
	p.children[spec.Name] = exited
	p.mu.Unlock()
	go func() {
		defer func() {
			close(exited)
			p.mu.Lock()
			delete(p.children, spec.Name)
			p.mu.Unlock()
		}()
		_ = cmd.Wait()
		code := []byte(strconv.Itoa(cmd.ProcessState.ExitCode()))
		if _, err := os.Stat(dir); err == nil {
			_ = os.WriteFile(filepath.Join(dir, exitFile), code, 0o600)
		}
	}()
	return pid, start, nil
}

// Get implements agentenv.Provider.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	m, err := readMeta(p.Dir(id))
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("process: get %s: %w", id, err)
	}
	sb := p.sandbox(m)
	if sb.State != agentenv.SandboxRunning {
		// The finished sandbox comes with the error, its exit code in it, as docker's does.
		return sb, fmt.Errorf("process: get %s: exit code %d: %w", id, sb.ExitCode, agentenv.ErrGone)
	}
	return sb, nil
}

// Terminate implements agentenv.Provider: it kills the process group and removes the folder.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if validName(id) != nil {
		return nil // nothing of ours can have that name
	}
	dir := p.Dir(id)
	m, err := readMeta(dir)
	if errors.Is(err, agentenv.ErrNotFound) {
		if _, serr := os.Stat(dir); serr != nil {
			return nil
		}
	} else if err == nil {
		p.kill(m)
		// A child of this process: let its reaper finish writing into the folder first.
		p.mu.Lock()
		exited := p.children[id]
		p.mu.Unlock()
		if exited != nil {
			select {
			case <-exited:
			case <-time.After(p.cfg.StopGrace + time.Second):
			case <-ctx.Done():
			}
		}
	}
	var err2 error
	for range 3 {
		if err2 = os.RemoveAll(dir); err2 == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("process: terminate %s: %w", id, err2)
}

// kill stops m's process group: SIGTERM, then SIGKILL after the grace period.
func (p *Provider) kill(m meta) {
	if m.PID <= 0 || !procinfo.Alive(m.PID, m.Start) {
		return
	}
	_ = syscall.Kill(-m.PID, syscall.SIGTERM)
	deadline := time.Now().Add(p.cfg.StopGrace)
	for time.Now().Before(deadline) {
		if !procinfo.Alive(m.PID, m.Start) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-m.PID, syscall.SIGKILL)
}

// List implements agentenv.Provider.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	entries, err := os.ReadDir(p.cfg.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("process: list: %w", err)
	}
	var out []agentenv.Sandbox
	for _, e := range entries {
		if !e.IsDir() || validName(e.Name()) != nil {
			continue
		}
		m, err := readMeta(p.Dir(e.Name()))
		if err != nil {
			continue
		}
		if m.Labels[agentenv.LabelRecord] == "" || !hasLabels(m.Labels, labels) {
			continue
		}
		out = append(out, p.sandbox(m))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Exec implements agentenv.Execer: argv runs in the work folder.
func (p *Provider) Exec(ctx context.Context, id string, argv []string) (agentenv.ExecResult, error) {
	if len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("process: exec in %s: empty command: %w", id, agentenv.ErrInvalid)
	}
	if _, err := p.Get(ctx, id); err != nil {
		return agentenv.ExecResult{}, err
	}
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = p.Dir(id)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err := cmd.Run()
	res := agentenv.ExecResult{Stdout: []byte(stdout.String()), Stderr: []byte(stderr.String())}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ctx.Err() == nil:
		res.ExitCode = ee.ExitCode()
	case err != nil:
		return res, fmt.Errorf("process: exec %s in %s: %w", argv[0], id, err)
	}
	return res, nil
}

// WriteFile implements agentenv.Files; path is relative to the work folder. It writes only a
// regular file inside the folder: a symbolic link that leads out of it, or a named pipe or a
// device at path, is refused (ErrInvalid) and nothing outside the folder is touched.
func (p *Provider) WriteFile(ctx context.Context, id, path string, data []byte) error {
	root, rel, err := p.within(id, path)
	if err != nil {
		return err
	}
	defer root.Close()
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("process: write %s in %s: %w", path, id, err)
		}
	}
	f, err := openRegular(root, rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("process: write %s in %s: %w", path, id, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("process: write %s in %s: %w", path, id, err)
	}
	return nil
}

// ReadFile implements agentenv.Files; path is relative to the work folder. It reads only a
// regular file inside the folder: a symbolic link that leads out of it is refused, and so is a
// named pipe or a device, whose read could wait for ever (ErrInvalid).
func (p *Provider) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	root, rel, err := p.within(id, path)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := openRegular(root, rel, os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("process: read %s in %s: %w", path, id, agentenv.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("process: read %s in %s: %w", path, id, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("process: read %s in %s: %w", path, id, err)
	}
	return b, nil
}

// openRegular opens rel under root with flag, never waiting on the open (O_NONBLOCK: a named
// pipe with no writer would hold it), and returns it only if it is a regular file.
func openRegular(root *os.Root, rel string, flag int) (*os.File, error) {
	f, err := root.OpenFile(rel, flag|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("not a regular file (%s): %w", fi.Mode().Type(), agentenv.ErrInvalid)
	}
	return f, nil
}

// within opens the work folder of id as an os.Root, which no symbolic link leads out of, and
// cleans path inside it, refusing paths that leave it lexically and the provider's own files.
// The caller closes the root.
func (p *Provider) within(id, path string) (*os.Root, string, error) {
	if _, err := os.Stat(filepath.Join(p.Dir(id), metaFile)); err != nil {
		return nil, "", fmt.Errorf("process: sandbox %s: %w", id, agentenv.ErrNotFound)
	}
	rel := filepath.Clean(strings.TrimPrefix(path, "/"))
	if rel == "." || rel == metaFile || rel == exitFile || strings.HasPrefix(rel, "..") {
		return nil, "", fmt.Errorf("process: path %q is outside the work folder of %s: %w", path, id, agentenv.ErrInvalid)
	}
	root, err := os.OpenRoot(p.Dir(id))
	if err != nil {
		return nil, "", fmt.Errorf("process: sandbox %s: %w", id, err)
	}
	return root, rel, nil
}

func (p *Provider) sandbox(m meta) agentenv.Sandbox {
	sb := agentenv.Sandbox{
		ID: m.Name, Name: m.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: m.Labels, Created: m.Created, Endpoints: map[string]string{},
	}
	if m.PID > 0 && !procinfo.Alive(m.PID, m.Start) {
		// A child of this process has its exit code written by the goroutine that reaps it:
		// wait for that (briefly) rather than report a code not yet known.
		p.mu.Lock()
		exited := p.children[m.Name]
		p.mu.Unlock()
		if exited != nil {
			select {
			case <-exited:
			case <-time.After(2 * time.Second):
			}
		}
		sb.State = agentenv.SandboxExited
		if b, err := os.ReadFile(filepath.Join(p.Dir(m.Name), exitFile)); err == nil {
			sb.ExitCode, _ = strconv.Atoi(string(b))
		}
	}
	for _, port := range m.Ports {
		sb.Endpoints[strconv.Itoa(port)] = "127.0.0.1:" + strconv.Itoa(port)
	}
	return sb
}

func writeMeta(dir string, m meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, metaFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, metaFile))
}

func readMeta(dir string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return m, agentenv.ErrNotFound
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dir, metaFile), err)
	}
	return m, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// nameRE is what a record id may look like here, as on the other providers.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// validName reports whether id is a record id, and so safe as a folder name.
func validName(id string) error {
	if !nameRE.MatchString(id) {
		return agentenv.ErrInvalid
	}
	return nil
}

package stdiobridge_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/mcpclient"
	"github.com/agentenv/agentenv/stdiobridge"
)

// pipeProcess is the test binary in a child mode as a stdiobridge.Process over plain pipes:
// what a process attached in a sandbox looks like to Serve (not a child Run starts itself).
type pipeProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	done   chan struct{}
	once   sync.Once
	closed chan struct{} // closed by Close
}

func startPipeProcess(t *testing.T, mode string) *pipeProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pipeProcess{cmd: cmd, stdin: in, stdout: out, done: make(chan struct{}), closed: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *pipeProcess) Read(b []byte) (int, error)  { return p.stdout.Read(b) }
func (p *pipeProcess) Write(b []byte) (int, error) { return p.stdin.Write(b) }
func (p *pipeProcess) CloseWrite() error           { return p.stdin.Close() }
func (p *pipeProcess) Done() <-chan struct{}       { return p.done }
func (p *pipeProcess) Stderr() string              { return "" }
func (p *pipeProcess) Close() error {
	p.once.Do(func() {
		close(p.closed)
		_ = p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return nil
}

func TestServe_KV(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	p := startPipeProcess(t, "kv")
	ep, err := stdiobridge.Serve(ctx, p, stdiobridge.ServeOptions{})
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	defer ep.Close()
	if !strings.HasPrefix(ep.URL, "http://127.0.0.1:") || ep.Token == "" {
		t.Errorf("endpoint %q with token %q, want one on 127.0.0.1 with a token", ep.URL, ep.Token)
	}

	// No token, no entry.
	resp, err := http.Post(ep.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without a token: %s, want 401", resp.Status)
	}

	cs, err := (&mcpclient.Client{Name: "test", Version: "v0"}).Connect(ctx, ep.URL, ep.Token)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	names, err := toolNames(ctx, cs)
	if err != nil || !slices.Equal(names, []string{"delete", "get", "list", "set"}) {
		t.Fatalf("tools = %v, %v", names, err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "set", Arguments: map[string]any{"key": "k", "value": "v"}}); err != nil {
		t.Fatalf("set: %v", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get", Arguments: map[string]any{"key": "k"}})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	var got struct {
		Value string `json:"value"`
	}
	structured(t, res, &got)
	if got.Value != "v" {
		t.Errorf("get k = %q, want v", got.Value)
	}

	// Close ends the process through its Close, and the server.
	if err := ep.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-p.closed:
	default:
		t.Error("Close did not close the process")
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Error("the process runs on after Close")
	}
	if _, err := http.Post(ep.URL, "application/json", strings.NewReader(`{}`)); err == nil {
		t.Error("the endpoint still answers after Close")
	}
	if err := ep.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestServe_ExitedBeforeInitialize: a process that ends before it answers initialize is an
// error of Serve naming the exit, and it is closed.
func TestServe_ExitedBeforeInitialize(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p := startPipeProcess(t, "exit-now")
	_, err := stdiobridge.Serve(ctx, p, stdiobridge.ServeOptions{})
	if !errors.Is(err, stdiobridge.ErrExited) {
		t.Errorf("Serve = %v, want an error wrapping ErrExited", err)
	}
	select {
	case <-p.closed:
	default:
		t.Error("Serve did not close the process it could not serve")
	}
}

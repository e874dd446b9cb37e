package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCall runs its backend and its gateway each in a process of its own, as a deployment
// does, so that neither pays for the other's (or the client's) garbage collection: the test
// binary serves as either when these variables are set.
const (
	benchRoleEnv    = "AGENTENV_GATEWAY_BENCH_ROLE"       // "backend", "gateway" or "proxy"
	benchBackendEnv = "AGENTENV_GATEWAY_BENCH_BACKEND"    // the backend's MCP URL, for "gateway" and "proxy"
	benchProfileEnv = "AGENTENV_GATEWAY_BENCH_CPUPROFILE" // a file for the gateway process's CPU profile
	childTimeout    = 20 * time.Second                    // to start, and to exit once told
	clockTicks      = 100                                 // USER_HZ of /proc/PID/stat on Linux
)

func TestMain(m *testing.M) {
	switch os.Getenv(benchRoleEnv) {
	case "backend":
		os.Exit(serveChild(serveBenchBackend))
	case "proxy":
		os.Exit(serveChild(serveBenchProxy))
	case "gateway":
		var profile *os.File
		if f := os.Getenv(benchProfileEnv); f != "" {
			if out, err := os.Create(f); err == nil && pprof.StartCPUProfile(out) == nil {
				profile = out
			}
		}
		code := serveChild(func(ctx context.Context, ready func(string)) error {
			cfg := gateway.Config{Token: testToken, Servers: []gateway.Backend{{Name: "a", URL: os.Getenv(benchBackendEnv)}}}
			return gateway.ListenAndServe(ctx, "127.0.0.1:0", cfg, func(addr string) { ready("http://" + addr + "/mcp") })
		})
		if profile != nil {
			pprof.StopCPUProfile()
			_ = profile.Close()
		}
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// serveChild runs serve until standard input closes, printing the URL it is ready on and the
// URL of its allocation counts (memStats) as the first line of standard output.
func serveChild(serve func(ctx context.Context, ready func(url string)) error) int {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	stats, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		_ = http.Serve(stats, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			_ = json.NewEncoder(w).Encode(memStats{Mallocs: ms.Mallocs, Bytes: ms.TotalAlloc})
		}))
	}()
	ready := func(url string) { fmt.Println(url, "http://"+stats.Addr().String()) }
	if err := serve(ctx, ready); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// serveBenchBackend serves the echo tool of newBackend(tb, "a", false, "echo").
func serveBenchBackend(ctx context.Context, ready func(string)) error {
	b := &testBackend{name: "a", mcp: mcp.NewServer(&mcp.Implementation{Name: "a", Version: "1"}, nil)}
	b.addEcho("echo")
	return serveHandler(ctx, ready, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return b.mcp },
		&mcp.StreamableHTTPOptions{JSONResponse: true}))
}

// serveHandler serves h on a loopback port until ctx ends, and reports its /mcp URL to ready.
func serveHandler(ctx context.Context, ready func(string), h http.Handler) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	ready("http://" + ln.Addr().String() + "/mcp")
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// serveBenchProxy serves a plain reverse proxy to the backend: the floor of what one more
// HTTP hop costs, to weigh the gateway against.
func serveBenchProxy(ctx context.Context, ready func(string)) error {
	target, err := url.Parse(os.Getenv(benchBackendEnv))
	if err != nil {
		return err
	}
	target.Path = ""
	rp := httputil.NewSingleHostReverseProxy(target)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 0, 1024
	rp.Transport, rp.FlushInterval = tr, -1
	return serveHandler(ctx, ready, rp)
}

// child is a benchmark process: its URL, its process (for its CPU time) and the URL of its
// allocation counts.
type child struct {
	url, stats string
	pid        int
}

// memStats are a child's allocations so far.
type memStats struct {
	Mallocs uint64 `json:"mallocs"`
	Bytes   uint64 `json:"bytes"`
}

// allocs returns the child's allocations so far.
func (c child) allocs(tb testing.TB) memStats {
	tb.Helper()
	var ms memStats
	resp, err := http.Get(c.stats)
	if err != nil {
		tb.Fatalf("allocation counts: %v", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&ms); err != nil {
		tb.Fatalf("allocation counts: %v", err)
	}
	return ms
}

// ownCPU returns the child's user and system CPU time so far.
func (c child) ownCPU() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // from field 3, the state
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// startChild starts the test binary as role with env, and stops it when tb ends.
func startChild(tb testing.TB, role string, env ...string) child {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(append(os.Environ(), benchRoleEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start the %s process: %v", role, err)
	}
	done := make(chan error, 1)
	tb.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-done:
		case <-time.After(childTimeout):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	urlc := make(chan []string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		urlc <- strings.Fields(line)
		_, _ = io.Copy(io.Discard, stdout)
		done <- cmd.Wait()
	}()
	select {
	case u := <-urlc:
		if len(u) != 2 {
			tb.Fatalf("the %s process printed %q, want its URL and its stats URL", role, u)
		}
		return child{url: u[0], stats: u[1], pid: cmd.Process.Pid}
	case <-time.After(childTimeout):
		tb.Fatalf("the %s process was not ready within %v", role, childTimeout)
	}
	return child{}
}

// cpuTime returns the user and system CPU time of this process and of the children, so far.
func cpuTime(children ...child) time.Duration {
	total := selfCPU()
	for _, c := range children {
		total += c.ownCPU()
	}
	return total
}

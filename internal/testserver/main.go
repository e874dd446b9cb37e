// Command testserver is a tiny static workload for test images. It is built with CGO_ENABLED=0
// and placed at /agentenv in a FROM scratch image (see package dockertest), so it has no shell
// and no libc to lean on.
//
// Usage:
//
//	testserver serve ADDR        serve HTTP 200 "ok" on / and /healthz until SIGTERM
//	testserver sleep             block until SIGTERM or SIGINT
//	testserver exit N            exit at once with status N
//	testserver write PATH TEXT   write TEXT to PATH, creating parent directories
//	testserver cat PATH          copy PATH to standard output
//	testserver echo ARGS...      print ARGS on standard output
//	testserver get URL           GET URL and print the body; exit 1 unless the status is 200
//	testserver id                print the process's uid and gid, as "UID:GID"
//	testserver alloc MIB         allocate and touch MIB mebibytes, then print "allocated"
//
// Errors go to standard error with exit status 1; a usage error exits with status 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	var code exitCode
	switch {
	case errors.As(err, &code):
		os.Exit(int(code))
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "usage: testserver serve ADDR | sleep | exit N | write PATH TEXT | cat PATH | echo ARGS... | get URL | id | alloc MIB")
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "testserver:", err)
		os.Exit(1)
	}
}

// exitCode is returned by run to exit with a chosen status.
type exitCode int

func (c exitCode) Error() string { return "exit " + strconv.Itoa(int(c)) }

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	switch cmd, args := args[0], args[1:]; {
	case cmd == "serve" && len(args) == 1:
		return serve(ctx, args[0])
	case cmd == "sleep" && len(args) == 0:
		<-ctx.Done()
		return nil
	case cmd == "exit" && len(args) == 1:
		n, err := strconv.Atoi(args[0])
		if err != nil {
			return errUsage
		}
		return exitCode(n)
	case cmd == "write" && len(args) == 2:
		if err := os.MkdirAll(filepath.Dir(args[0]), 0o755); err != nil {
			return err
		}
		return os.WriteFile(args[0], []byte(args[1]), 0o644)
	case cmd == "cat" && len(args) == 1:
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(stdout, f)
		return err
	case cmd == "echo":
		_, err := fmt.Fprintln(stdout, strings.Join(args, " "))
		return err
	case cmd == "get" && len(args) == 1:
		return get(ctx, args[0], stdout)
	case cmd == "id" && len(args) == 0:
		_, err := fmt.Fprintf(stdout, "%d:%d\n", os.Getuid(), os.Getgid())
		return err
	case cmd == "alloc" && len(args) == 1:
		mib, err := strconv.Atoi(args[0])
		if err != nil || mib < 0 {
			return errUsage
		}
		return alloc(mib, stdout)
	}
	return errUsage
}

// alloc holds mib MiB of touched memory at once, so that a memory limit below it kills the
// process instead of the page cache absorbing it.
func alloc(mib int, stdout io.Writer) error {
	chunks := make([][]byte, mib)
	for i := range chunks {
		chunks[i] = make([]byte, 1<<20)
		for j := 0; j < len(chunks[i]); j += 4096 {
			chunks[i][j] = 1
		}
	}
	_, err := fmt.Fprintln(stdout, "allocated")
	return err
}

func serve(ctx context.Context, addr string) error {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }
	mux.HandleFunc("/{$}", ok)
	mux.HandleFunc("/healthz", ok)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := cleanup.Context(ctx, 2*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	}
}

func get(ctx context.Context, url string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(stdout, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	return nil
}

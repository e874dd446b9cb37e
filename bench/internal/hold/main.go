// Command hold is the process `agentenv bench` kills with SIGKILL to measure gc of orphans: it
// creates --n sandboxes on the docker provider through the lifecycle manager, on the bench's
// ledger, prints "ready N", and waits. Left alone, it tears them down at its deadline (--wait).
// bench builds it from the checkout when it runs (go build ./bench/internal/hold), so that the
// user's binary carries no command only a benchmark needs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		os.Exit(1)
	}
}

// run parses args, creates the sandboxes, prints "ready N" to stdout once all are up, and
// waits until ctx ends or --wait passes; then it tears them down, printing the receipt to
// stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hold", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		n      = fs.Int("n", 50, "sandboxes to create")
		image  = fs.String("image", "agentenv:dev", "image to run")
		dsn    = fs.String("ledger", "", "ledger path or postgres:// DSN; required")
		host   = fs.String("docker-host", "", "Docker engine address; default $DOCKER_HOST, else the local socket")
		wait   = fs.Duration("wait", 10*time.Minute, "tear down and exit after this long if not killed")
		create = fs.Int("concurrency", 8, "creates in flight at once")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dsn == "" || *n < 1 || *create < 1 {
		return fmt.Errorf("want --ledger, --n >= 1 and --concurrency >= 1: %w", agentenv.ErrInvalid)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	led, err := ledger.Open(ctx, *dsn, log)
	if err != nil {
		return fmt.Errorf("open ledger: %w", err)
	}
	defer led.Close()
	prov, err := docker.New(docker.Config{Host: *host}, log)
	if err != nil {
		return err
	}
	defer prov.Close()
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{prov.Name(): prov}, Logger: log})
	if err != nil {
		return err
	}
	defer mgr.Close()

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ids  []string
		errs []error
	)
	sem := make(chan struct{}, *create)
	for range *n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rec, _, err := mgr.Create(ctx, lifecycle.CreateRequest{
				Provider: prov.Name(),
				Spec:     agentenv.SandboxSpec{Image: *image, Command: []string{"/agentenv", "serve", "kv"}},
				TTL:      time.Hour,
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ids = append(ids, rec.ID)
		})
	}
	wg.Wait()
	if len(errs) == 0 && ctx.Err() == nil {
		fmt.Fprintf(stdout, "ready %d\n", len(ids))
		wctx, cancel := context.WithTimeout(ctx, *wait)
		<-wctx.Done()
		cancel()
	}
	rc, terr := mgr.TeardownIDs(ctx, ids...)
	fmt.Fprintf(stderr, "hold: torn down %d of %d sandboxes\n", len(rc.Items), len(ids))
	if len(errs) > 0 {
		terr = errors.Join(fmt.Errorf("%d of %d creates failed; first: %w", len(errs), *n, errs[0]), terr)
	}
	return terr
}

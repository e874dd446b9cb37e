// Command temporal-devserver runs a Temporal server for agentenv's integration tests: the
// server module's own temporaltest package (SQLite in memory, every service in this process)
// on 127.0.0.1, with the namespaces named by -namespace registered.
//
// It lives in a module of its own so that the Temporal server's dependencies stay out of the
// product's go.mod. Build it with scripts/temporal/build.sh; scripts/temporal/up.sh and
// internal/temporalserver start it.
//
// When every namespace answers, it prints to stdout
//
//	AGENTENV_TEST_TEMPORAL=HOST:PORT
//	AGENTENV_TEST_TEMPORAL_NAMESPACE=NAME[,NAME...]
//
// and serves until SIGTERM or SIGINT, then stops the server and exits 0. Bad flags exit 2; a
// server that does not come up within -ready-timeout exits 1. temporaltest picks the port
// itself (a free one), so there is no -port flag.
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
	"regexp"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/temporal"
	"go.temporal.io/server/temporaltest"
	"google.golang.org/protobuf/types/known/durationpb"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// nsName is what Temporal accepts as a namespace name (letters, digits, '-', '_', '.').
var nsName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$`)

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("temporal-devserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nsFlag := fs.String("namespace", "default", "comma-separated namespaces to register")
	retention := fs.Duration("retention", 24*time.Hour, "workflow execution retention of the registered namespaces")
	readyTimeout := fs.Duration("ready-timeout", 30*time.Second, "wall-clock limit for the server and its namespaces to answer")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "temporal-devserver: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	namespaces, err := parseNamespaces(*nsFlag)
	if err != nil {
		fmt.Fprintf(stderr, "temporal-devserver: -namespace: %v\n", err)
		return 2
	}
	if *retention < time.Hour {
		fmt.Fprintf(stderr, "temporal-devserver: -retention: %v is under Temporal's minimum of 1h\n", *retention)
		return 2
	}
	if *readyTimeout <= 0 {
		fmt.Fprintf(stderr, "temporal-devserver: -ready-timeout: must be positive\n")
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	start := time.Now()
	srv := temporaltest.NewServer(temporaltest.WithBaseServerOptions(temporal.WithDynamicConfigClient(devConfig)))
	defer stopServer(srv, log)
	addr := srv.GetFrontendHostPort()

	readyCtx, cancel := context.WithTimeout(ctx, *readyTimeout)
	err = register(readyCtx, addr, namespaces, *retention, log)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "temporal-devserver: %s not ready after %v: %v\n", addr, time.Since(start).Round(time.Millisecond), err)
		return 1
	}
	fmt.Fprintf(stdout, "AGENTENV_TEST_TEMPORAL=%s\nAGENTENV_TEST_TEMPORAL_NAMESPACE=%s\n", addr, strings.Join(namespaces, ","))
	fmt.Fprintf(stderr, "temporal-devserver: ready on %s in %v (namespaces %s)\n", addr, time.Since(start).Round(time.Millisecond), strings.Join(namespaces, ","))

	<-ctx.Done()
	fmt.Fprintf(stderr, "temporal-devserver: stopping\n")
	return 0
}

// devConfig is the server's dynamic config: temporaltest's own (search attributes read fresh),
// and history queues that read as fast as their tasks come. temporaltest runs one history shard,
// so every workflow's transfer and timer tasks go through one queue of each, whose default read
// rate (20 a second) made each hop of an episode (child started, activity scheduled, child
// done) wait its turn: a steady 300 ms per episode on an idle machine.
var devConfig = dynamicconfig.StaticClient{
	dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): []dynamicconfig.ConstrainedValue{{Value: true}},
	dynamicconfig.TransferProcessorMaxPollRPS.Key():             []dynamicconfig.ConstrainedValue{{Value: 10000}},
	dynamicconfig.TimerProcessorMaxPollRPS.Key():                []dynamicconfig.ConstrainedValue{{Value: 10000}},
}

func parseNamespaces(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if !nsName.MatchString(n) {
			return nil, fmt.Errorf("%q is not a namespace name", n)
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// register registers each namespace on the server at addr and waits, retrying until ctx ends,
// until each one is described back.
func register(ctx context.Context, addr string, namespaces []string, retention time.Duration, log *slog.Logger) error {
	nc, err := dialNamespaces(ctx, addr, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, ns := range namespaces {
		req := &workflowservice.RegisterNamespaceRequest{
			Namespace:                        ns,
			WorkflowExecutionRetentionPeriod: durationpb.New(retention),
		}
		if err := retry(ctx, func() error {
			err := nc.Register(ctx, req)
			var exists *serviceerror.NamespaceAlreadyExists
			if errors.As(err, &exists) {
				return nil
			}
			return err
		}); err != nil {
			return fmt.Errorf("register namespace %s: %w", ns, err)
		}
		if err := retry(ctx, func() error {
			_, err := nc.Describe(ctx, ns)
			return err
		}); err != nil {
			return fmt.Errorf("describe namespace %s: %w", ns, err)
		}
	}
	return nil
}

func dialNamespaces(ctx context.Context, addr string, log *slog.Logger) (client.NamespaceClient, error) {
	var nc client.NamespaceClient
	err := retry(ctx, func() error {
		c, err := client.NewNamespaceClient(client.Options{
			HostPort: addr,
			Logger:   sdklog.NewStructuredLogger(log),
		})
		if err != nil {
			return err
		}
		nc = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return nc, nil
}

// retry calls f every 100 ms until it succeeds or ctx ends; it returns f's last error then.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopServer stops srv. temporaltest's Stop logs a failed shutdown through the test it was given,
// and this program gives none, so such a failure would panic: it is reported here instead.
func stopServer(srv *temporaltest.TestServer, log *slog.Logger) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("temporal-devserver: stop failed", "panic", r)
		}
	}()
	srv.Stop()
}

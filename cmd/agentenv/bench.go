package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/bench"
	"github.com/agentenv/agentenv/soak"
)

func newBenchCmd(a *app) *cobra.Command {
	var f struct {
		reps, hellos, orphans   int
		loadEpisodes, webCalls  int
		webEnv                  string
		webConcurrency          []int
		stateStore              string
		image, env, repo, write string
		dir                     string
		only, imageMap          []string
		json                    bool
	}
	cmd := &cobra.Command{
		Use:   "bench [--write BENCHMARKS.md] [--reps N] [--json]",
		Short: "Measure agentenv side by side with docker compose and the docker CLI on this machine",
		Long: `bench runs, in one go on this machine: deploy to ready and teardown of bench/env.yaml (notes
with PostgreSQL, the DB web UI and db-mcp, plus two more MCP servers) through agentenv and,
alternately, 'docker compose up -d --wait' / 'docker compose down -t 1' of the file
'agentenv env render --compose' makes of it; the gateway's tools/call overhead against direct
calls at 1 and 64 sessions (go test -bench in the checkout); 'agentenv run hello'; gc of 50
sandboxes whose owner was killed with SIGKILL (the owner is a small program bench builds from
the checkout, bench/internal/hold); one sandbox create/terminate against 'docker run -d' /
'docker rm -f' of the same image; one episode of the Harbor task
harbor/testdata/corpus/hello-file with the oracle ('agentenv run', its image built once
before) against the same steps with the docker CLI on that image (docker run -d, cp, exec,
rm -f); 'agentenv tasks check harbor/testdata/corpus' with every build image torn down
first, then again with them built (the build images are torn down after); and (web) the shop
with the browser, examples/shop/browser.yaml: deploy to ready against 'docker compose up -d
--wait' of its rendered file, browser_navigate and browser_snapshot through the gateway against
straight to the Playwright MCP server (at the sidecar's address, which the host reaches), the
sidecar's peak memory meanwhile (the engine's stats), and 1, 2, 4 and 6 such deployments at once,
each opening the shop in its browser. It prints medians,
p95 and ratios, and with --write rewrites the marked section of that file; --only takes some
of the measures. Without docker compose v5 it says how to build it (sh bench/build-compose.sh)
and measures the rest. Run it from the repository root.`,
		Example: `  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o agentenv ./cmd/agentenv && ./agentenv images build
  ./agentenv bench --write BENCHMARKS.md
  ./agentenv bench --only gc --orphans 10
  ./agentenv bench --only harbor --reps 10
  ./agentenv bench --only web --reps 5 --web-calls 40 --web-concurrency 1,2,4,6`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			if f.repo == "" {
				if _, err := os.Stat(filepath.Join("gateway", "bench_test.go")); err == nil {
					f.repo, _ = os.Getwd()
				}
			}
			for _, n := range f.webConcurrency {
				if n < 1 {
					return fmt.Errorf("--web-concurrency %d: want 1 or more: %w", n, agentenv.ErrInvalid)
				}
			}
			if f.webCalls < 1 {
				return fmt.Errorf("--web-calls %d: want 1 or more: %w", f.webCalls, agentenv.ErrInvalid)
			}
			if _, err := os.Stat(f.env); err != nil {
				return fmt.Errorf("bench env %s: %w (run from the repository root, or give --env): %w", f.env, err, agentenv.ErrInvalid)
			}
			if f.dir == "" {
				if f.dir, err = os.MkdirTemp("", "agentenv-bench-"); err != nil {
					return fmt.Errorf("bench: %w", err)
				}
				defer os.RemoveAll(f.dir)
			}
			host, err := a.cfg.Get("provider.docker.host")
			if err != nil {
				return err
			}
			eng, err := soak.NewDocker(host)
			if err != nil {
				return err
			}
			defer eng.Close()
			res, err := bench.Run(cmd.Context(), bench.Config{
				Binary: bin, Dir: f.dir, EnvFile: f.env, Image: f.image, RepoDir: f.repo, Engine: eng,
				Reps: f.reps, Hellos: f.hellos, Orphans: f.orphans, Only: f.only, ImageMap: f.imageMap,
				StateStore: f.stateStore, LoadEpisodes: f.loadEpisodes, DockerHost: host, Logger: a.log,
				WebEnv: f.webEnv, WebCalls: f.webCalls, WebConcurrency: f.webConcurrency,
				Progress: func(s string) { fmt.Fprintln(a.stderr, "bench:", s) },
			})
			if err != nil {
				return err
			}
			if res.Machine.Compose == "not installed" {
				fmt.Fprintln(a.stderr, "bench:", bench.ComposeHelp)
			}
			if f.json {
				err = printJSON(a.stdout, res)
			} else {
				err = bench.WriteTable(a.stdout, res)
			}
			if err != nil {
				return err
			}
			if f.write != "" {
				if err := bench.WriteMarkdown(f.write, bench.Markdown(res)); err != nil {
					return err
				}
				fmt.Fprintf(a.stderr, "bench: figures written to %s\n", f.write)
			}
			if len(res.Problems) > 0 {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.reps, "reps", 5, "samples of each deploy, sandbox and Harbor episode measure")
	fl.IntVar(&f.loadEpisodes, "load-episodes", 16, "concurrent episodes of the load measure, run without and with a state store")
	fl.StringVar(&f.stateStore, "state-store", "", "PostgreSQL server of the load measure's round with a store (default: one started with 'agentenv state up --name' and removed after)")
	fl.IntVar(&f.hellos, "hellos", 10, "runs of agentenv run hello")
	fl.IntVar(&f.orphans, "orphans", 50, "sandboxes left by the killed process for gc")
	fl.StringVar(&f.image, "image", "agentenv:dev", "image of the bare sandboxes and orphans")
	fl.StringVar(&f.env, "env", filepath.Join("bench", "env.yaml"), "env deployed side by side with docker compose")
	fl.StringVar(&f.repo, "repo", "", "agentenv checkout for the gateway benchmark and the orphans' holder (default: the working directory, if it is one)")
	fl.StringVar(&f.write, "write", "", "rewrite the bench section of this markdown file (BENCHMARKS.md)")
	fl.StringVar(&f.dir, "dir", "", "folder for the bench's ledger and state (default: a temporary one)")
	fl.StringSliceVar(&f.only, "only", nil, "take only these measures: "+strings.Join(bench.Steps, ", ")+" (default: all)")
	fl.StringArrayVar(&f.imageMap, "image-map", nil, "map a Harbor task's base image onto a local one, FROM=TO (repeatable; default: "+strings.Join(bench.DefaultImageMap(), ", ")+")")
	fl.StringVar(&f.webEnv, "web-env", bench.DefaultWebEnv, "env of the web measure: a website with the browser (its folder is copied, agentenv:dev replaced by --image)")
	fl.IntVar(&f.webCalls, "web-calls", bench.DefaultWebCalls, "browser_navigate and browser_snapshot calls the web measure times on each path")
	fl.IntSliceVar(&f.webConcurrency, "web-concurrency", bench.DefaultWebConcurrency, "counts of browser deployments the web measure runs at once")
	fl.BoolVar(&f.json, "json", false, "print the figures as JSON")
	return cmd
}

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/images"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker"
)

func newImagesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "images", Short: "Build the images agentenv runs, without a registry; list and prune cached Dockerfile builds"}
	var tag string
	build := &cobra.Command{
		Use:   "build [--tag agentenv:dev]",
		Short: "Build the runtime image (FROM scratch + this static binary) on the local engine",
		Long: `build makes the image every Go component runs from (the gateway, the example servers,
db-mcp, the stdio bridge): FROM scratch plus this binary at /agentenv. The binary must be
static: CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' (without debug information it is a
third of the size, and so is every image upload to a VM). The PostgreSQL, DB web UI and Node
images are built by images/debian/build.sh in the repository.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, err := a.cfg.Get("provider.docker.host")
			if err != nil {
				return err
			}
			p, err := docker.New(docker.Config{Host: host}, a.log)
			if err != nil {
				return err
			}
			defer p.Close()
			start := time.Now()
			if err := images.BuildSelf(cmd.Context(), p.Client(), tag); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "built %s in %s\n", tag, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	build.Flags().StringVar(&tag, "tag", images.RuntimeTag, "image tag")
	cmd.AddCommand(build, newImagesLsCmd(a), newImagesPruneCmd(a))
	return cmd
}

// builtImage is one row of images ls: a cached build from a Dockerfile.
type builtImage struct {
	Record   string    `json:"record"`
	Provider string    `json:"provider"`
	Image    string    `json:"image"`
	Digest   string    `json:"digest"` // the build context's (agentenv.build.digest)
	Created  time.Time `json:"created"`
	Expires  time.Time `json:"expires"`
}

func builtImages(recs []agentenv.Record) []builtImage {
	out := make([]builtImage, 0, len(recs))
	for _, r := range recs {
		out = append(out, builtImage{Record: r.ID, Provider: r.Provider, Image: r.Attrs[agentenv.AttrImageRef],
			Digest: r.Labels[agentenv.LabelBuildDigest], Created: r.Created, Expires: r.Expires})
	}
	return out
}

func printBuiltImages(a *app, imgs []builtImage) {
	rows := make([][]string, 0, len(imgs))
	for _, im := range imgs {
		rows = append(rows, []string{im.Record, im.Provider, im.Image, shortDigest(im.Digest),
			im.Created.Local().Format(time.DateTime), im.Expires.Local().Format(time.DateTime)})
	}
	table(a.stdout, []string{"RECORD", "PROVIDER", "IMAGE", "DIGEST", "CREATED", "EXPIRES"}, rows)
}

// shortDigest is a build digest cut for a table to its first 12 hex digits (after its
// algorithm, if it names one).
func shortDigest(d string) string {
	alg, hex, ok := strings.Cut(d, ":")
	if !ok {
		alg, hex = "", d
	} else {
		alg += ":"
	}
	return alg + hex[:min(12, len(hex))]
}

func newImagesLsCmd(a *app) *cobra.Command {
	var f struct{ json bool }
	cmd := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List the images built from Dockerfiles (Harbor tasks, deploy_sandbox's build) that are cached for reuse",
		Long: fmt.Sprintf(`ls lists the live images built from a Dockerfile: each is a ledger record (kind image, role
build) labelled with its build context's digest, reused by every build of the same context
until it expires (%s after it was built; gc removes it then). 'agentenv images prune'
removes them sooner.`, lifecycle.BuildTTL),
		RunE: func(cmd *cobra.Command, _ []string) error {
			mgr, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			recs, err := mgr.BuiltImages(cmd.Context())
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, builtImages(recs))
			}
			printBuiltImages(a, builtImages(recs))
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

func newImagesPruneCmd(a *app) *cobra.Command {
	var f struct{ all, dryRun, json bool }
	cmd := &cobra.Command{
		Use:   "prune [--all] [--dry-run] [--json]",
		Short: "Remove cached images built from Dockerfiles: those expiring within a day, or --all",
		Long: fmt.Sprintf(`prune tears down cached builds (see 'agentenv images ls') by record and prints the verified
receipt. Without --all it takes those that expire within %s, which no build reuses any
more; with --all every one (a run that needs one again builds it again). A build another
process is still handing over is never taken. Exit code 1 when anything is not confirmed
down (gc retries it).`, lifecycle.PruneSoon),
		RunE: func(cmd *cobra.Command, _ []string) error {
			mgr, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			sel, rc, perr := mgr.PruneBuilds(cmd.Context(), lifecycle.PruneOptions{All: f.all, DryRun: f.dryRun})
			if perr != nil && len(rc.Items) == 0 {
				return perr
			}
			switch {
			case f.json && f.dryRun:
				if err := printJSON(a.stdout, builtImages(sel)); err != nil {
					return err
				}
			case f.json:
				if err := printJSON(a.stdout, rc); err != nil {
					return err
				}
			case f.dryRun:
				fmt.Fprintf(a.stdout, "would remove %d built image(s):\n", len(sel))
				printBuiltImages(a, builtImages(sel))
			default:
				printReceipt(a.stdout, rc)
			}
			if !rc.Clean() {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.all, "all", false, "remove every cached build, not only those expiring within a day")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "say what would be removed, remove nothing")
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON (the receipt; with --dry-run, the images)")
	return cmd
}

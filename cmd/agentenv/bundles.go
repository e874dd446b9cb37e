package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/bundle"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/images"
	"github.com/agentenv/agentenv/provider/docker"
)

// plainHTTPKey lists the registries reached over plain HTTP.
const plainHTTPKey = "registry.plain_http"

// bundleClient returns the client of bundles: the cache in $XDG_CACHE_HOME, the registries of
// registry.plain_http (every one with plainHTTP) over HTTP, the Docker config's credentials.
func (a *app) bundleClient(plainHTTP bool) (*bundle.Client, error) {
	dir, err := bundle.DefaultDir(os.Getenv)
	if err != nil {
		return nil, err
	}
	raw, err := a.cfg.Get(plainHTTPKey)
	if err != nil {
		return nil, err
	}
	var hosts []string
	for _, h := range strings.Split(raw, ",") {
		if h = strings.TrimSpace(strings.TrimPrefix(h, "oci://")); h != "" {
			hosts = append(hosts, h)
		}
	}
	return &bundle.Client{
		Cache:     bundle.Cache{Dir: dir},
		PlainHTTP: func(host string) bool { return plainHTTP || slices.Contains(hosts, host) },
		Log:       a.log,
	}, nil
}

// logins is how a deployment of a bundle's pinned images logs in to their registry: the logins
// `docker login` left (bundle.Client.Login). A worker needs it for bundles it has yet to fetch.
func (a *app) logins() (agentenv.Logins, error) {
	c, err := a.bundleClient(false)
	if err != nil {
		return nil, err
	}
	return c.Login, nil
}

// pull is the one way a command fetches a bundle: ref parsed, pulled through this machine's
// cache (over plain HTTP where plainHTTP or registry.plain_http says), and, when the registry
// could not be reached and the cache's copy of the tag is used, that said on stderr.
func (a *app) pull(ctx context.Context, ref bundle.Ref, plainHTTP bool) (*bundle.Resolved, error) {
	c, err := a.bundleClient(plainHTTP)
	if err != nil {
		return nil, err
	}
	r, err := c.Pull(ctx, ref)
	if err != nil {
		return nil, err
	}
	if r.Offline != nil {
		fmt.Fprintf(a.stderr, "agentenv: %v\nagentenv: using the cached %s (%s)\n", r.Offline, ref, r.Digest)
	}
	return r, nil
}

// fromBundle sets the options of a group run from the bundle from (nil: from local files) so
// that the group and its episodes record it, and a worker or a resume can fetch it again.
func fromBundle(opts *eval.Options, from *bundle.Resolved) {
	if from != nil {
		opts.Bundle, opts.BundleDigest, opts.BundleTree = from.Ref.String(), from.Digest, from.Tree
	}
}

// fetchBundle makes the bundle ref pinned to digest present in this machine's cache (pulled
// over plain HTTP where registry.plain_http says) and returns its folder: how a worker, or a
// resume, reads a group run from a bundle (eval.Runner.Fetch).
func (a *app) fetchBundle(ctx context.Context, ref, digest string) (eval.Fetched, error) {
	r, err := bundle.ParseRef(ref)
	if err != nil {
		return eval.Fetched{}, err
	}
	res, err := a.pull(ctx, r.At(digest), false)
	if err != nil {
		return eval.Fetched{}, err
	}
	return eval.Fetched{Tree: res.Tree, Pinned: res.Pins()}, nil
}

// localPath is the one resolver of a command's TASK, EVAL, ENV or DIR argument: an existing
// local path (or the built-in hello) is itself, always; a registry reference is pulled (a
// digest already cached with no network) and is the path of its entry in the cache's tree,
// with the bundle it came from; anything else is returned as given, for the loader to refuse.
// kinds are the bundle kinds the command takes.
func (a *app) localPath(ctx context.Context, arg string, plainHTTP bool, kinds ...bundle.Kind) (string, *bundle.Resolved, error) {
	if _, err := os.Stat(arg); err == nil || arg == "hello" || !bundle.IsRef(arg) {
		return arg, nil, nil
	}
	ref, err := bundle.ParseRef(arg)
	if err != nil {
		return "", nil, fmt.Errorf("%s is no file or folder here, and %w", arg, err)
	}
	r, err := a.pull(ctx, ref, plainHTTP)
	if errors.Is(err, agentenv.ErrUnavailable) {
		return "", nil, fmt.Errorf("%w (nor is %s a file or folder here)", err, arg)
	}
	if err != nil {
		return "", nil, err
	}
	if !slices.Contains(kinds, r.Config.Kind) {
		return "", nil, fmt.Errorf("%s is a bundle of kind %s; this command takes %s: %w", ref, r.Config.Kind, kindList(kinds), agentenv.ErrInvalid)
	}
	a.log.Debug("bundle resolved", "ref", ref.String(), "digest", r.Digest, "path", r.Path, "cached", r.Cached)
	return r.Path, r, nil
}

func kindList(kinds []bundle.Kind) string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// plainHTTPFlag registers --plain-http on fl.
func plainHTTPFlag(fl *pflag.FlagSet, v *bool) {
	fl.BoolVar(v, "plain-http", false, "reach a registry reference's registry over plain HTTP, not HTTPS (a local registry; or list it in "+plainHTTPKey+")")
}

// enginePusher pushes images from the Docker engine of provider.docker.host (images.Push).
type enginePusher struct{ cli *client.Client }

// PushImage implements bundle.ImagePusher.
func (e enginePusher) PushImage(ctx context.Context, image, target, user, password string) (string, error) {
	return images.Push(ctx, e.cli, image, target, images.Login{User: user, Password: password})
}

func newPushCmd(a *app) *cobra.Command {
	var f struct{ plainHTTP, json, withImages bool }
	cmd := &cobra.Command{
		Use:   "push PATH REF [--with-images] [--plain-http] [--json]",
		Short: "Push a task, an eval, an env or a Harbor task folder to an OCI registry as a bundle",
		Long: `push packs PATH (what 'agentenv run' or 'env deploy' takes: a task file or folder, an eval
file, an env file, a Harbor task folder or dataset) with every file it reads and nothing else,
deterministically (the same files make the same digest), and pushes it to REF,
host[:port]/repo[:tag] (oci:// optional; tag latest if none) in any OCI registry. It prints the
pinned reference, REF@sha256:..., which 'agentenv run' reproduces byte for byte.

Credentials are those 'docker login HOST' leaves: the Docker config file ($DOCKER_CONFIG/config.json,
else ~/.docker/config.json) and its credential helpers. A file a task names by an absolute path,
or a symbolic link leading outside the bundle's folder, is refused before anything is pushed.

With --with-images, the images PATH's envs and tasks run (every component of each env, the
image of each deploy_sandbox step that names one; not the images a task builds from a
Dockerfile, which are built where it runs) are pushed first from the local Docker engine to the
same registry, as REF's host/repo/images/NAME:TAG, and the bundle pins each by digest. A run or
deploy of the bundle then runs those digests, pulled with the same login: docker pulls one it
lacks; the VM engines of docker_vm and of the cloud providers' VM modes pull it instead of an
upload from this host (and upload when the pull fails, saying so); kubernetes runs it (and the
image as named when the node cannot pull it); modal builds it. The engine treats a registry on
127.0.0.0/8 as plain HTTP; another needs TLS or the engine's insecure-registries.`,
		Example: `  agentenv push examples/notes-task ghcr.io/team/notes-task:v1
  agentenv push examples/notes/env.yaml 127.0.0.1:5000/team/notes:v1 --with-images --plain-http
  agentenv push examples/evals/sweep.yaml 127.0.0.1:5000/evals/sweep:v1 --plain-http
  agentenv run ghcr.io/team/notes-task:v1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := bundle.ParseRef(args[1])
			if err != nil {
				return err
			}
			src, err := bundle.Collect(args[0])
			if err != nil {
				return err
			}
			c, err := a.bundleClient(f.plainHTTP)
			if err != nil {
				return err
			}
			if f.withImages {
				host, err := a.cfg.Get("provider.docker.host")
				if err != nil {
					return err
				}
				dp, err := docker.New(docker.Config{Host: host}, a.log)
				if err != nil {
					return err
				}
				defer dp.Close()
				c.Images = enginePusher{dp.Client()}
			}
			start := time.Now()
			p, err := c.Push(cmd.Context(), src, ref)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, struct {
					Ref    string         `json:"ref"`
					Digest string         `json:"digest"`
					Kind   bundle.Kind    `json:"kind"`
					Entry  string         `json:"entry"`
					Files  []bundle.File  `json:"files"`
					Root   string         `json:"root"`
					Images []bundle.Image `json:"images"`
				}{p.Ref.String(), p.Digest, p.Config.Kind, p.Config.Entry, p.Config.Files, p.Root, p.Config.Images})
			}
			for _, im := range p.Config.Images {
				fmt.Fprintf(a.stderr, "pushed image %s as %s\n", im.Ref, im.Pinned())
			}
			for _, l := range p.ImagesLeft {
				fmt.Fprintf(a.stderr, "note: not pushed: %s\n", l)
			}
			fmt.Fprintf(a.stderr, "pushed %s %s (%d files from %s, %s compressed) in %s\n", p.Config.Kind, p.Config.Entry, len(p.Config.Files), p.Root, bytesText(p.Size), time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(a.stdout, p.Ref.String())
			return nil
		},
	}
	plainHTTPFlag(cmd.Flags(), &f.plainHTTP)
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	cmd.Flags().BoolVar(&f.withImages, "with-images", false, "push the images the envs and tasks run (from the local Docker engine) beside the bundle, pinned by digest")
	return cmd
}

func newPullCmd(a *app) *cobra.Command {
	var f struct{ plainHTTP, json bool }
	cmd := &cobra.Command{
		Use:   "pull REF [--plain-http] [--json]",
		Short: "Fetch a bundle into the local cache; prints its digest and the folder of its files",
		Long: `pull fetches the bundle REF names (host[:port]/repo[:tag][@sha256:...]) into the local cache
($XDG_CACHE_HOME/agentenv/bundles), every blob verified against its digest and every file
against the bundle's config: a tampered bundle is refused and nothing of it is kept. A digest
already in the cache needs no network; a tag is asked of the registry, and when the registry
cannot be reached the cache's copy is used (said on stderr). 'agentenv run REF' pulls the same
way.`,
		Example: `  agentenv pull ghcr.io/team/notes-task:v1
  agentenv pull 127.0.0.1:5000/notes-task@sha256:3f2a... --plain-http`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := bundle.ParseRef(args[0])
			if err != nil {
				return err
			}
			start := time.Now()
			r, err := a.pull(cmd.Context(), ref, f.plainHTTP)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, struct {
					Ref    string      `json:"ref"`
					Digest string      `json:"digest"`
					Kind   bundle.Kind `json:"kind"`
					Tree   string      `json:"tree"`
					Path   string      `json:"path"`
					Cached bool        `json:"cached"`
				}{ref.String(), r.Digest, r.Config.Kind, r.Tree, r.Path, r.Cached || r.Offline != nil})
			}
			fmt.Fprintf(a.stderr, "pulled %s %s (%d files) in %s\n", r.Config.Kind, r.Config.Entry, len(r.Config.Files), time.Since(start).Round(time.Millisecond))
			fmt.Fprintf(a.stdout, "%s@%s\n%s\n", ref.Name(), r.Digest, r.Path)
			return nil
		},
	}
	plainHTTPFlag(cmd.Flags(), &f.plainHTTP)
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

func newBundlesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "bundles", Short: "List, inspect and remove the bundles in the local cache"}
	var lsJSON, inspectJSON bool
	cache := func() (bundle.Cache, error) {
		c, err := a.bundleClient(false)
		if err != nil {
			return bundle.Cache{}, err
		}
		return c.Cache, nil
	}
	ls := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List the references the cache holds",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cache()
			if err != nil {
				return err
			}
			es, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			if lsJSON {
				if es == nil {
					es = []bundle.Entry{}
				}
				return printJSON(a.stdout, es)
			}
			rows := make([][]string, 0, len(es))
			for _, e := range es {
				rows = append(rows, []string{e.Ref, string(e.Kind), e.Entry, strconv.Itoa(len(e.Files)), bytesText(e.Size), shortDigest(e.Digest)})
			}
			table(a.stdout, []string{"REFERENCE", "KIND", "ENTRY", "FILES", "SIZE", "DIGEST"}, rows)
			return nil
		},
	}
	ls.Flags().BoolVar(&lsJSON, "json", false, "print JSON")
	inspect := &cobra.Command{
		Use:   "inspect REF [--json]",
		Short: "Show a cached bundle: kind, entry, files, digest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := bundle.ParseRef(args[0])
			if err != nil {
				return err
			}
			c, err := cache()
			if err != nil {
				return err
			}
			e, err := c.Inspect(cmd.Context(), ref)
			if err != nil {
				return err
			}
			if inspectJSON {
				return printJSON(a.stdout, e)
			}
			fmt.Fprintf(a.stdout, "reference %s\ndigest    %s\nkind      %s\nname      %s\nentry     %s\n", e.Ref, e.Digest, e.Kind, e.Name, e.Entry)
			if e.Tree != "" {
				fmt.Fprintf(a.stdout, "files in  %s\n", e.Tree)
			}
			rows := make([][]string, 0, len(e.Files))
			for _, f := range e.Files {
				rows = append(rows, []string{f.Path, strconv.FormatInt(f.Size, 10), f.Digest})
			}
			table(a.stdout, []string{"FILE", "BYTES", "DIGEST"}, rows)
			return nil
		},
	}
	inspect.Flags().BoolVar(&inspectJSON, "json", false, "print JSON")
	rm := &cobra.Command{
		Use:   "rm REF...",
		Short: "Remove references from the cache (a bundle's files go with its last reference)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cache()
			if err != nil {
				return err
			}
			var errs []error
			for _, arg := range args {
				ref, err := bundle.ParseRef(arg)
				if err == nil {
					err = c.Remove(cmd.Context(), ref)
				}
				if err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintf(a.stdout, "removed %s\n", ref)
			}
			return errors.Join(errs...)
		},
	}
	cmd.AddCommand(ls, inspect, rm)
	return cmd
}

// bytesText is n bytes for a person: 812 B, 3.4 KiB, 2.1 MiB.
func bytesText(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

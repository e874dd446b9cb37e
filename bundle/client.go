package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/errcode"
	"oras.land/oras-go/v2/registry/remote/retry"

	"github.com/agentenv/agentenv"
)

// DefaultTimeout bounds one push or pull when Client.Timeout is 0.
const DefaultTimeout = 10 * time.Minute

// Client pushes bundles to registries and pulls them into its cache.
type Client struct {
	Cache Cache
	// PlainHTTP reports whether a registry host (HOST:PORT) is reached over plain HTTP rather
	// than HTTPS; nil: none is.
	PlainHTTP func(host string) bool
	// Credentials answers a registry's login; nil: the Docker config file
	// ($DOCKER_CONFIG/config.json, else ~/.docker/config.json) and its credential helpers, as
	// `docker login` leaves them.
	Credentials credentials.Store
	// Images, when set, pushes the images a bundle's envs and tasks run ([Source.ImageRefs])
	// beside it on Push, to host/repo/images/NAME:TAG, and the bundle pins them by digest;
	// nil: a bundle is pushed without its images.
	Images ImagePusher
	// Timeout bounds one push or pull (DefaultTimeout if 0).
	Timeout time.Duration
	Log     *slog.Logger
}

// Pushed is what a push wrote.
type Pushed struct {
	Ref    Ref // as pushed, pinned to the digest: host/repo:tag@sha256:…
	Tag    string
	Digest string
	Config Config
	Root   string // the folder the bundle's paths are relative to
	Size   int64  // of the layer, compressed
	// ImagesLeft says, with Client.Images, what runs images the bundle does not carry
	// (Source.ImageRefs), one line each.
	ImagesLeft []string
}

// Resolved is a bundle found for a reference, its files unpacked in the cache.
type Resolved struct {
	Ref    Ref // as asked for
	Digest string
	Config Config
	Tree   string // the folder holding the bundle's files
	Path   string // the entry in Tree: what is run or deployed
	// Cached says the cache answered with no network: a digest reference it holds.
	Cached bool
	// Offline is, when the registry could not be reached and the cache's copy of the tag was
	// used, why the registry could not be reached.
	Offline error
}

// Pins are the images of r's bundle pinned by digest (Config.Pins); nil for a nil r, a path
// that was no bundle.
func (r *Resolved) Pins() map[string]string {
	if r == nil {
		return nil
	}
	return r.Config.Pins()
}

func (c *Client) log() *slog.Logger {
	if c.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Log
}

func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	t := c.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return context.WithTimeout(ctx, t)
}

// Push packs src, records it in the cache and pushes it to ref's repository under ref's tag
// ("latest" when it has none), with c.Images its images first. A reference with a digest is
// refused: a push names a tag.
func (c *Client) Push(ctx context.Context, src Source, ref Ref) (Pushed, error) {
	if ref.Digest != "" {
		return Pushed{}, fmt.Errorf("push %s: a push names a tag (host/repo:tag), not a digest: the digest is the registry's answer: %w", ref, agentenv.ErrInvalid)
	}
	if ref.Tag == "" {
		ref.Tag = "latest"
	}
	p, err := Pack(src)
	if err != nil {
		return Pushed{}, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	var left []string
	if c.Images != nil {
		var refs []string
		if refs, left, err = src.ImageRefs(); err != nil {
			return Pushed{}, err
		}
		imgs, err := c.pushImages(ctx, ref, refs)
		if err != nil {
			return Pushed{}, err
		}
		if err := p.withImages(imgs); err != nil {
			return Pushed{}, err
		}
	}
	blobs, err := c.Cache.blobs()
	if err != nil {
		return Pushed{}, err
	}
	desc, err := p.Push(ctx, blobs)
	if err != nil {
		return Pushed{}, fmt.Errorf("push %s: into the cache: %w", ref, err)
	}
	manifest, err := fetchAll(ctx, blobs, desc, maxManifest)
	if err != nil {
		return Pushed{}, err
	}
	repo, err := c.repository(ref)
	if err != nil {
		return Pushed{}, err
	}
	m, err := checkManifest(manifest)
	if err != nil {
		return Pushed{}, err
	}
	for _, d := range []ocispec.Descriptor{m.Layers[0], m.Config} {
		ok, err := repo.Exists(ctx, d)
		if err != nil {
			return Pushed{}, c.explain("push", ref, err)
		}
		if ok {
			continue
		}
		rc, err := blobs.Fetch(ctx, d)
		if err != nil {
			return Pushed{}, fmt.Errorf("push %s: blob %s: %w", ref, d.Digest, err)
		}
		err = repo.Push(ctx, d, rc)
		rc.Close()
		if err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return Pushed{}, c.explain("push", ref, err)
		}
	}
	if err := repo.PushReference(ctx, desc, bytes.NewReader(manifest), ref.Tag); err != nil {
		return Pushed{}, c.explain("push", ref, err)
	}
	if err := c.Cache.record(ctx, ref, desc); err != nil {
		return Pushed{}, err
	}
	c.log().Debug("bundle pushed", "ref", ref.String(), "digest", desc.Digest.String(), "files", len(p.Config.Files), "bytes", p.Size())
	pinned := ref
	pinned.Digest = desc.Digest.String()
	return Pushed{Ref: pinned, Tag: ref.Tag, Digest: desc.Digest.String(), Config: p.Config, Root: p.Root, Size: p.Size(), ImagesLeft: left}, nil
}

// Pull returns the bundle ref names with its files unpacked in the cache. A digest reference
// the cache holds needs no network. A tag is asked of the registry each time (the blobs the
// cache holds are not fetched again); when the registry cannot be reached and the cache holds
// the tag, the cache's copy is used and Resolved.Offline says why. Every blob is verified
// against its digest before it enters the cache, and every file against the config before
// it enters a tree: a tampered bundle is refused and leaves nothing to run.
func (c *Client) Pull(ctx context.Context, ref Ref) (*Resolved, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if ref.Digest != "" {
		if desc, err := c.Cache.resolve(ctx, ref); err == nil {
			return c.resolved(ctx, ref, desc, true, nil)
		}
	}
	desc, err := c.fetch(ctx, ref)
	if err != nil {
		if !errors.Is(err, agentenv.ErrUnavailable) || ref.Digest != "" {
			return nil, err
		}
		cached, cerr := c.Cache.resolve(ctx, ref)
		if cerr != nil {
			return nil, fmt.Errorf("%w; and the bundle cache holds no copy of it", err)
		}
		return c.resolved(ctx, ref, cached, false, err)
	}
	return c.resolved(ctx, ref, desc, false, nil)
}

func (c *Client) resolved(ctx context.Context, ref Ref, desc ocispec.Descriptor, cached bool, offline error) (*Resolved, error) {
	tree, cfg, err := c.Cache.tree(ctx, desc)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	return &Resolved{Ref: ref, Digest: desc.Digest.String(), Config: cfg, Tree: tree,
		Path: filepath.Join(tree, filepath.FromSlash(cfg.Entry)), Cached: cached, Offline: offline}, nil
}

// fetch brings ref's manifest and blobs from its registry into the cache, each verified
// against its digest, and records the reference.
func (c *Client) fetch(ctx context.Context, ref Ref) (ocispec.Descriptor, error) {
	if ref.Tag == "" && ref.Digest == "" {
		ref.Tag = "latest"
	}
	repo, err := c.repository(ref)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc, rc, err := repo.FetchReference(ctx, ref.reference())
	if err != nil {
		return desc, c.explain("pull", ref, err)
	}
	defer rc.Close()
	if desc.Size > maxManifest {
		return desc, fmt.Errorf("pull %s: not an agentenv bundle: a manifest of %d bytes: %w", ref, desc.Size, agentenv.ErrInvalid)
	}
	manifest, err := content.ReadAll(rc, desc)
	if err != nil {
		return desc, fmt.Errorf("pull %s: manifest %s does not match its digest: refused: %w: %w", ref, desc.Digest, err, agentenv.ErrInvalid)
	}
	m, err := checkManifest(manifest)
	if err != nil {
		return desc, fmt.Errorf("pull %s: %w", ref, err)
	}
	blobs, err := c.Cache.blobs()
	if err != nil {
		return desc, err
	}
	for _, d := range []ocispec.Descriptor{m.Config, m.Layers[0]} {
		if d.Size > MaxSize+maxConfig {
			return desc, fmt.Errorf("pull %s: blob %s of %d bytes, more than a bundle may have: %w", ref, d.Digest, d.Size, agentenv.ErrInvalid)
		}
		if ok, err := blobs.Exists(ctx, d); err == nil && ok {
			continue
		}
		rc, err := repo.Fetch(ctx, d)
		if err != nil {
			return desc, c.explain("pull", ref, err)
		}
		err = blobs.Push(ctx, d, rc)
		rc.Close()
		switch {
		case errors.Is(err, content.ErrMismatchedDigest) || errors.Is(err, content.ErrTrailingData) || errors.Is(err, errdef.ErrSizeExceedsLimit):
			return desc, fmt.Errorf("pull %s: blob %s does not match its digest (tampered with or damaged in the registry): refused, nothing kept: %w", ref, d.Digest, agentenv.ErrInvalid)
		case err != nil && !errors.Is(err, errdef.ErrAlreadyExists):
			return desc, c.explain("pull", ref, fmt.Errorf("blob %s: %w", d.Digest, err))
		}
	}
	if _, err := parseConfigBlob(ctx, blobs, m.Config); err != nil {
		return desc, fmt.Errorf("pull %s: %w", ref, err)
	}
	if err := blobs.Push(ctx, desc, bytes.NewReader(manifest)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return desc, fmt.Errorf("pull %s: into the cache: %w", ref, err)
	}
	if err := c.Cache.record(ctx, ref, desc); err != nil {
		return desc, err
	}
	return desc, nil
}

func parseConfigBlob(ctx context.Context, f content.Fetcher, d ocispec.Descriptor) (Config, error) {
	data, err := fetchAll(ctx, f, d, maxConfig)
	if err != nil {
		return Config{}, err
	}
	return parseConfig(data)
}

// repository is ref's repository on its registry, over plain HTTP when c says so, with the
// credentials of the Docker config.
func (c *Client) repository(ref Ref) (*remote.Repository, error) {
	repo, err := remote.NewRepository(ref.Name())
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", ref, err, agentenv.ErrInvalid)
	}
	repo.PlainHTTP = c.PlainHTTP != nil && c.PlainHTTP(ref.Host)
	store, err := c.credentials()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = 10 * time.Second
	tr.ResponseHeaderTimeout = time.Minute
	repo.Client = &auth.Client{
		Client:     &http.Client{Transport: retry.NewTransport(tr)},
		Cache:      auth.NewCache(),
		Credential: credentials.Credential(store),
		Header:     http.Header{"User-Agent": {"agentenv"}},
	}
	return repo, nil
}

// credentials is c's store of registry logins: Credentials, else the Docker config's.
func (c *Client) credentials() (credentials.Store, error) {
	if c.Credentials != nil {
		return c.Credentials, nil
	}
	ds, err := credentials.NewStoreFromDocker(credentials.StoreOptions{})
	if err != nil {
		return nil, fmt.Errorf("registry credentials (the Docker config file, $DOCKER_CONFIG/config.json or ~/.docker/config.json): %w: %w", err, agentenv.ErrInvalid)
	}
	return ds, nil
}

// explain turns a registry's error into one that says what to do: log in, name another tag,
// use --plain-http, or that the registry cannot be reached (wrapping agentenv.ErrUnavailable).
func (c *Client) explain(op string, ref Ref, err error) error {
	var er *errcode.ErrorResponse
	switch {
	case errors.Is(err, auth.ErrBasicCredentialNotFound):
		return fmt.Errorf("%s %s: the registry %s asks for a login, and the Docker config file ($DOCKER_CONFIG/config.json) has none for it: log in with 'docker login %s': %w",
			op, ref, ref.Host, ref.Host, agentenv.ErrInvalid)
	case errors.As(err, &er) && (er.StatusCode == http.StatusUnauthorized || er.StatusCode == http.StatusForbidden):
		return fmt.Errorf("%s %s: the registry %s refused the %s (HTTP %d): log in with 'docker login %s' (agentenv uses the credentials of the Docker config file, $DOCKER_CONFIG/config.json, and its credential helpers): %w",
			op, ref, ref.Host, op, er.StatusCode, ref.Host, agentenv.ErrInvalid)
	case errors.Is(err, errdef.ErrNotFound) || (errors.As(err, &er) && er.StatusCode == http.StatusNotFound):
		what := "tag " + ref.Tag
		if ref.Digest != "" {
			what = "digest " + ref.Digest
		}
		return fmt.Errorf("%s %s: the registry %s has no %s in %s: %w: %w", op, ref, ref.Host, what, ref.Repo, agentenv.ErrNotFound, agentenv.ErrInvalid)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%s %s: the registry %s speaks plain HTTP: give --plain-http, or list it in registry.plain_http: %w", op, ref, ref.Host, agentenv.ErrInvalid)
	case unreachable(err):
		return &unavailable{fmt.Sprintf("%s %s: the registry %s cannot be reached: %v", op, ref, ref.Host, err)}
	}
	return fmt.Errorf("%s %s: %w", op, ref, err)
}

// unreachable reports whether err says the registry did not answer at all: a refused or
// failed connection, a name that does not resolve, a timeout.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	var ne net.Error
	return errors.As(err, &op) || errors.As(err, &dns) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// unavailable is a registry that did not answer: agentenv.ErrUnavailable to errors.Is, said
// in words of its own (the kind's text speaks of providers).
type unavailable struct{ msg string }

func (e *unavailable) Error() string { return e.msg }

// Is reports whether target is agentenv.ErrUnavailable.
func (e *unavailable) Is(target error) bool { return target == agentenv.ErrUnavailable }

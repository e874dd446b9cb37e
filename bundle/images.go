package bundle

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/registrylogin"
	"github.com/agentenv/agentenv/spec"
	"github.com/agentenv/agentenv/task"
)

// ImagesRepo is the folder of a bundle's repository its images are pushed under:
// host/repo/images/NAME:TAG.
const ImagesRepo = "images"

// ImagePusher pushes images from where they are (the local engine) to a registry.
type ImagePusher interface {
	// PushImage pushes image to target (host[:port]/repo:tag), logging in as user with
	// password when user is set, and returns the digest (sha256:HEX) of the manifest the
	// registry stored: the same image gives the same digest. It leaves the engine as it was.
	PushImage(ctx context.Context, image, target, user, password string) (digest string, err error)
}

// Pinned is the image pinned by digest: Name@Digest, which a provider pulls.
func (i Image) Pinned() string { return i.Name + "@" + i.Digest }

// check reports an image a bundle's config pins that no provider should be handed: no ref, a
// name that is not host/repository, a digest that is not sha256:HEX.
func (i Image) check() error {
	host, repo, _ := strings.Cut(i.Name, "/")
	if i.Ref == "" || !IsRef(i.Name) || !hostRE.MatchString(host) || !imageNameRE.MatchString(repo) || !digestRE.MatchString(i.Digest) {
		return fmt.Errorf("image %q pinned as %q: want a ref and host/repository@sha256:HEX: %w", i.Ref, i.Pinned(), agentenv.ErrInvalid)
	}
	return nil
}

// Pins maps each image of c as its env or task names it to its pinned reference; nil when the
// bundle carries no images.
func (c Config) Pins() map[string]string {
	if len(c.Images) == 0 {
		return nil
	}
	out := make(map[string]string, len(c.Images))
	for _, im := range c.Images {
		out[im.Ref] = im.Pinned()
	}
	return out
}

// ImageRefs returns the images src's envs and tasks run, sorted, each once: every component
// image of each env file among its files (servers, websites, the service DB and its web UI and
// db-mcp, the browser, the gateway), and the image of each deploy_sandbox step of its task
// files that names one as it is (not built, not filled in when the step runs). left says, one
// line each, what runs images that are not listed: a deploy_sandbox step that builds its
// image, a Harbor task (its environment is a Dockerfile, compose file or docker_image, built or
// pulled where it runs).
func (src Source) ImageRefs() (refs, left []string, err error) {
	var out []string
	if src.Kind == KindHarborTask || src.Kind == KindHarborDataset {
		left = append(left, "the Harbor task's environment is built (or its docker_image pulled) where it runs")
	}
	for _, f := range src.Files {
		data, err := os.ReadFile(f)
		if err != nil || !strings.HasSuffix(f, ".yaml") && !strings.HasSuffix(f, ".yml") {
			continue
		}
		switch topKey(data) {
		case "env":
			e, err := spec.Load(f)
			if err != nil {
				return nil, nil, err
			}
			comps, err := e.Components(spec.TopologyOptions{LookupEnv: func(string) (string, bool) { return "", true }})
			if err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", f, err)
			}
			for _, c := range comps {
				if c.Image != "" {
					out = append(out, c.Image)
				}
			}
		case "steps":
			t, err := task.Load(f)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, t.Images()...)
			for _, id := range t.Builds() {
				left = append(left, fmt.Sprintf("%s: step %s builds its image from a Dockerfile where it runs", f, id))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), left, nil
}

// imageTarget is where image goes in ref's registry: host/repo/images/NAME:TAG, NAME its
// repository path without a registry host, TAG its tag (latest if none; a digest-only image
// is tagged by its digest's first 12 hex digits).
func imageTarget(ref Ref, image string) (string, error) {
	name, tag := image, "latest"
	if n, dg, ok := strings.Cut(name, "@"); ok {
		name, tag = n, strings.TrimPrefix(dg, "sha256:")
		if len(tag) > 12 {
			tag = tag[:12]
		}
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, tag = name[:i], name[i+1:]
	}
	if first, rest, ok := strings.Cut(name, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		name = rest
	}
	name = strings.ToLower(name)
	if !imageNameRE.MatchString(name) || !tagRE.MatchString(tag) {
		return "", fmt.Errorf("image %q: not a reference that can be pushed under %s/%s: %w", image, ref.Name(), ImagesRepo, agentenv.ErrInvalid)
	}
	return ref.Name() + "/" + ImagesRepo + "/" + name + ":" + tag, nil
}

var imageNameRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)

// pushImages pushes each of refs to ref's registry through c.Images and returns them pinned.
func (c *Client) pushImages(ctx context.Context, ref Ref, refs []string) ([]Image, error) {
	user, password, err := c.login(ctx, ref.Host)
	if err != nil {
		return nil, err
	}
	out := make([]Image, 0, len(refs))
	for _, image := range refs {
		target, err := imageTarget(ref, image)
		if err != nil {
			return nil, err
		}
		digest, err := c.Images.PushImage(ctx, image, target, user, password)
		if err != nil {
			return nil, fmt.Errorf("push %s: image %s: %w", ref, image, err)
		}
		name, _, _ := strings.Cut(target[len(ref.Name())+1:], ":")
		out = append(out, Image{Ref: image, Name: ref.Name() + "/" + name, Digest: digest})
		c.log().Debug("image pushed", "image", image, "as", target, "digest", digest)
	}
	return out, nil
}

// Login implements agentenv.Logins: the Docker config's login to the registry of ref, a pinned
// image, for a provider's pull of it; nil when there is none or it cannot be read (logged), and
// the pull goes anonymously.
func (c *Client) Login(ctx context.Context, ref string) *agentenv.RegistryAuth {
	store, err := c.credentials()
	var cred auth.Credential
	if err == nil {
		cred, err = store.Get(ctx, registrylogin.Host(ref))
	}
	if err != nil {
		c.log().Warn("no registry login for a pull; pulling anonymously", "image", ref, "err", err)
		return nil
	}
	if cred == auth.EmptyCredential || cred.Username == "" && cred.Password == "" && cred.RefreshToken == "" {
		return nil
	}
	return &agentenv.RegistryAuth{Username: cred.Username, Password: cred.Password, IdentityToken: cred.RefreshToken}
}

// login is the Docker config's user and password for host, "" for none.
func (c *Client) login(ctx context.Context, host string) (string, string, error) {
	store, err := c.credentials()
	if err != nil {
		return "", "", err
	}
	cred, err := store.Get(ctx, host)
	if err != nil {
		return "", "", fmt.Errorf("registry credentials for %s: %w", host, err)
	}
	return cred.Username, cred.Password, nil
}

package images

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/internal/cleanup"
)

// untagBound bounds the removal of the references a push added.
const untagBound = 30 * time.Second

// Login is a registry's user and password, as `docker login` leaves them; zero for none.
type Login struct{ User, Password string }

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Push pushes the engine's image to target (host[:port]/repo:tag) through the engine, with
// login, and returns the digest of the manifest the registry stored: a content digest, so the
// same image pushed again gives the same one. The engine treats registries on 127.0.0.0/8 as
// plain HTTP. The tag and digest references the push adds to the engine are removed again, so
// the engine holds what it held before.
func Push(ctx context.Context, cli *client.Client, image, target string, login Login) (digest string, err error) {
	if _, err := cli.ImageInspect(ctx, image); err != nil {
		return "", fmt.Errorf("images: push %s: not on the engine: %w", image, err)
	}
	if _, err := cli.ImageTag(ctx, client.ImageTagOptions{Source: image, Target: target}); err != nil {
		return "", fmt.Errorf("images: push %s: tag %s: %w", image, target, err)
	}
	defer func() {
		// Untag only: the image keeps its own name.
		refs := []string{target}
		if digest != "" {
			refs = append(refs, repoOf(target)+"@"+digest)
		}
		cctx, cancel := cleanup.Context(ctx, untagBound)
		defer cancel()
		for _, r := range refs {
			_, _ = cli.ImageRemove(cctx, r, client.ImageRemoveOptions{})
		}
	}()
	// The engine wants the header even with no login: "{}".
	data, err := json.Marshal(registry.AuthConfig{Username: login.User, Password: login.Password})
	if err != nil {
		return "", err
	}
	auth := base64.URLEncoding.EncodeToString(data)
	resp, err := cli.ImagePush(ctx, target, client.ImagePushOptions{RegistryAuth: auth})
	if err != nil {
		return "", fmt.Errorf("images: push %s to %s: %w", image, target, err)
	}
	for msg, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return "", fmt.Errorf("images: push %s to %s: %w", image, target, err)
		}
		if msg.Error != nil {
			return "", fmt.Errorf("images: push %s to %s: %s", image, target, msg.Error.Message)
		}
		if msg.Aux != nil {
			var aux struct{ Digest string }
			if json.Unmarshal(*msg.Aux, &aux) == nil && digestRE.MatchString(aux.Digest) {
				digest = aux.Digest
			}
		}
	}
	if digest == "" {
		return "", fmt.Errorf("images: push %s to %s: the engine reported no digest", image, target)
	}
	return digest, nil
}

// repoOf is ref without its tag: host[:port]/repo.
func repoOf(ref string) string {
	for i := len(ref) - 1; i >= 0 && ref[i] != '/'; i-- {
		if ref[i] == ':' {
			return ref[:i]
		}
	}
	return ref
}

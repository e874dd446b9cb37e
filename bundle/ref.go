package bundle

import (
	"fmt"
	"regexp"
	"strings"

	"oras.land/oras-go/v2/registry"

	"github.com/agentenv/agentenv"
)

// Ref is a bundle's reference: host[:port]/repo[:tag][@sha256:HEX].
type Ref struct {
	Host   string // registry host and optional port: "ghcr.io", "127.0.0.1:5000"
	Repo   string // repository path: "team/notes-task"
	Tag    string // "" when the reference names only a digest
	Digest string // "sha256:HEX", or ""
}

// ociScheme is the optional prefix of a reference.
const ociScheme = "oci://"

var (
	hostRE   = regexp.MustCompile(`^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*)(:[0-9]{1,5})?$`)
	tagRE    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
	digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// IsRef reports whether s has the shape of a registry reference rather than a local name: a
// first path element that is a host (it has a '.' or a ':', or is localhost) and a repository
// after it. "hello", "examples/notes-task" and "./task.yaml" are not references.
func IsRef(s string) bool {
	s = strings.TrimPrefix(s, ociScheme)
	host, rest, ok := strings.Cut(s, "/")
	if !ok || rest == "" || !hostRE.MatchString(host) {
		return false
	}
	return host == "localhost" || strings.ContainsAny(host, ".:")
}

// ParseRef parses a reference; an error wraps agentenv.ErrInvalid and says which part is wrong.
func ParseRef(s string) (Ref, error) {
	bad := func(format string, args ...any) (Ref, error) {
		return Ref{}, fmt.Errorf("reference %q: %s: %w", s, fmt.Sprintf(format, args...), agentenv.ErrInvalid)
	}
	if !IsRef(s) {
		return bad("want host[:port]/repo[:tag][@sha256:HEX], such as ghcr.io/team/notes-task:v1 (a name with no host is not a reference)")
	}
	host, rest, _ := strings.Cut(strings.TrimPrefix(s, ociScheme), "/")
	var r Ref
	r.Host = host
	if name, dg, ok := strings.Cut(rest, "@"); ok {
		if !digestRE.MatchString(dg) {
			return bad("digest %q: want sha256: and 64 lower-case hex digits", dg)
		}
		rest, r.Digest = name, dg
	}
	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		rest, r.Tag = rest[:i], rest[i+1:]
		if !tagRE.MatchString(r.Tag) {
			return bad("tag %q: want letters, digits, '_', '.' or '-' (at most 128, not starting with '.' or '-')", r.Tag)
		}
	}
	r.Repo = rest
	if err := (registry.Reference{Registry: r.Host, Repository: r.Repo}).ValidateRepository(); err != nil {
		return bad("repository %q: want lower-case path components of letters, digits and separators", r.Repo)
	}
	return r, nil
}

// String is the reference in its full form, without oci://.
func (r Ref) String() string {
	s := r.Name()
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// Name is host/repo.
func (r Ref) Name() string { return r.Host + "/" + r.Repo }

// At returns r pinned to digest: host/repo@digest, the tag dropped.
func (r Ref) At(digest string) Ref { return Ref{Host: r.Host, Repo: r.Repo, Digest: digest} }

// reference is what the registry is asked for: the digest when r has one, else the tag.
func (r Ref) reference() string {
	if r.Digest != "" {
		return r.Digest
	}
	return r.Tag
}

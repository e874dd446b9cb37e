package bundle

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
)

const hexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestParseRef(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Ref
	}{
		{"ghcr.io/team/notes-task:v1", Ref{Host: "ghcr.io", Repo: "team/notes-task", Tag: "v1"}},
		{"oci://127.0.0.1:5000/notes:latest", Ref{Host: "127.0.0.1:5000", Repo: "notes", Tag: "latest"}},
		{"localhost/a/b/c", Ref{Host: "localhost", Repo: "a/b/c"}},
		{"localhost:5000/notes@sha256:" + hexA, Ref{Host: "localhost:5000", Repo: "notes", Digest: "sha256:" + hexA}},
		{"r.example.com/notes:v2@sha256:" + hexA, Ref{Host: "r.example.com", Repo: "notes", Tag: "v2", Digest: "sha256:" + hexA}},
		{"[::1]:5000/notes:v1", Ref{Host: "[::1]:5000", Repo: "notes", Tag: "v1"}},
	} {
		got, err := ParseRef(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if !IsRef(c.in) {
			t.Errorf("IsRef(%q) = false", c.in)
		}
		if s := got.String(); s != strings.TrimPrefix(c.in, "oci://") {
			t.Errorf("ParseRef(%q).String() = %q", c.in, s)
		}
	}
}

func TestNotARef(t *testing.T) {
	for _, s := range []string{"hello", "examples/notes-task", "./task.yaml", "../x/y", "task.yaml", "/abs/path", "notes:v1", "ghcr.io", "ghcr.io/", ".hidden.d/x"} {
		if IsRef(s) {
			t.Errorf("IsRef(%q) = true, want false", s)
		}
		if _, err := ParseRef(s); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("ParseRef(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

func TestParseRefNamesTheBadPart(t *testing.T) {
	for _, c := range []struct{ in, part string }{
		{"ghcr.io/Team/notes:v1", "repository"},
		{"ghcr.io/team/notes:-v1", "tag"},
		{"ghcr.io/team/notes@sha256:abc", "digest"},
		{"ghcr.io/team/notes@md5:" + hexA, "digest"},
	} {
		_, err := ParseRef(c.in)
		if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), c.part) {
			t.Errorf("ParseRef(%q) = %v, want ErrInvalid naming the %s", c.in, err, c.part)
		}
	}
}

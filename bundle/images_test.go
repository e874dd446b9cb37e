package bundle

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentenv/agentenv"
)

func TestImageTarget(t *testing.T) {
	ref := Ref{Host: "127.0.0.1:5000", Repo: "team/notes", Tag: "v1"}
	for image, want := range map[string]string{
		"agentenv:dev":                 "127.0.0.1:5000/team/notes/images/agentenv:dev",
		"agentenv-postgres:local":      "127.0.0.1:5000/team/notes/images/agentenv-postgres:local",
		"postgres":                     "127.0.0.1:5000/team/notes/images/postgres:latest",
		"ghcr.io/org/tool:1.2":         "127.0.0.1:5000/team/notes/images/org/tool:1.2",
		"localhost:5000/x/y:z":         "127.0.0.1:5000/team/notes/images/x/y:z",
		"debian@sha256:" + hex64("ab"): "127.0.0.1:5000/team/notes/images/debian:" + hex64("ab")[:12],
		"Mixed/Case:tag":               "127.0.0.1:5000/team/notes/images/mixed/case:tag",
	} {
		got, err := imageTarget(ref, image)
		if err != nil || got != want {
			t.Errorf("imageTarget(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
	if _, err := imageTarget(ref, "bad name:tag"); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("a name with a space: %v, want ErrInvalid", err)
	}
}

func hex64(s string) string {
	out := ""
	for len(out) < 64 {
		out += s
	}
	return out[:64]
}

// TestImageRefsOfNotes: the notes task's images are its env's components', each once.
func TestImageRefsOfNotes(t *testing.T) {
	src, err := Collect(filepath.Join("..", "examples", "notes-task"))
	if err != nil {
		t.Fatal(err)
	}
	got, left, err := src.ImageRefs()
	if err != nil || len(left) != 0 {
		t.Fatal(err, left)
	}
	want := []string{"agentenv-adminer:local", "agentenv-postgres:local", "agentenv:dev"}
	if !slices.Equal(got, want) {
		t.Errorf("ImageRefs = %v, want %v", got, want)
	}
}

func TestPins(t *testing.T) {
	if (Config{}).Pins() != nil || (*Resolved)(nil).Pins() != nil {
		t.Error("no images: want nil pins")
	}
	c := Config{Images: []Image{{Ref: "agentenv:dev", Name: "h:1/r/images/agentenv", Digest: "sha256:" + hex64("0")}}}
	if got := c.Pins()["agentenv:dev"]; got != "h:1/r/images/agentenv@sha256:"+hex64("0") {
		t.Errorf("pin %q", got)
	}
}

func TestImageCheck(t *testing.T) {
	good := Image{Ref: "agentenv:dev", Name: "127.0.0.1:5000/team/notes/images/agentenv", Digest: "sha256:" + hex64("ab")}
	if err := good.check(); err != nil {
		t.Errorf("%+v: %v", good, err)
	}
	for _, bad := range []Image{
		{Name: good.Name, Digest: good.Digest},
		{Ref: "x", Name: "agentenv", Digest: good.Digest},
		{Ref: "x", Name: "127.0.0.1:5000/Team/x", Digest: good.Digest},
		{Ref: "x", Name: "127.0.0.1:5000/a b", Digest: good.Digest},
		{Ref: "x", Name: good.Name, Digest: "sha256:short"},
		{Ref: "x", Name: good.Name + "@sha256:" + hex64("cd"), Digest: good.Digest},
	} {
		if err := bad.check(); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
}

package spec

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestFilesOfTheShopEnv(t *testing.T) {
	e, err := Load("../examples/shop/env.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Files()
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := filepath.Abs("../examples/shop")
	want := []string{filepath.Join(dir, "env.yaml"), filepath.Join(dir, "schema.sql"), filepath.Join(dir, "seed.sql")}
	if !slices.Equal(got, want) {
		t.Fatalf("Files() = %q, want %q", got, want)
	}
}

func TestFilesRefusesAnAbsolutePath(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed.sql")
	if err := os.WriteFile(seed, []byte("SELECT 1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := "name: x\nservers:\n  - name: s\n    image: i\n    port: 8080\nservice_db:\n  seed:\n    - " + seed + "\n"
	e, err := Parse(filepath.Join(dir, "env.yaml"), []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Files()
	var fe *Error
	if !errors.As(err, &fe) || fe.Path != "service_db.seed[0]" || fe.Line != 8 {
		t.Fatalf("Files() = %v, want an error at line 8, service_db.seed[0]", err)
	}
}

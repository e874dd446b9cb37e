package spec_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestRenderCompose(t *testing.T) {
	tests := []struct {
		name   string
		file   string
		opts   spec.ComposeOptions
		golden string
	}{
		{"notes", "../examples/notes/env.yaml", spec.ComposeOptions{Deployment: "dep-1"}, "notes.compose.golden"},
		{"kv", "../examples/kv/env.yaml", spec.ComposeOptions{}, "kv.compose.golden"},
		{"multi", "../examples/multi/env.yaml", spec.ComposeOptions{AgentenvBinary: "/usr/local/bin/agentenv"}, "multi.compose.golden"},
		{"shop", "../examples/shop/env.yaml", spec.ComposeOptions{Deployment: "dep-1", ComposeDir: "../examples/shop"}, "shop.compose.golden"},
		{"full", "testdata/full.yaml", spec.ComposeOptions{
			Project:        "full-test",
			AgentenvBinary: "./bin/agentenv",
			ComposeDir:     ".",
			DBHealthcheck:  []string{"CMD-SHELL", "psql -U app -d appdb -c 'select 1' || exit 1"},
		}, "full.compose.golden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := spec.Load(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := spec.RenderCompose(env, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			again, err := spec.RenderCompose(env, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(again) {
				t.Errorf("RenderCompose() is not deterministic")
			}
			path := filepath.Join("testdata", tt.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestRenderCompose -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("RenderCompose(%s) (-want +got):\n%s", tt.file, diff)
			}
		})
	}
}

func TestRenderCompose_stdioNeedsBinary(t *testing.T) {
	env, err := spec.Load("../examples/multi/env.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = spec.RenderCompose(env, spec.ComposeOptions{})
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("RenderCompose(no AgentenvBinary) = %v, want agentenv.ErrInvalid", err)
	}
}

package buildctx

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
)

var testLabels = map[string]string{"agentenv.record": "img-1", "agentenv.role": "build"}

const testLabel = `LABEL "agentenv.record"="img-1" "agentenv.role"="build"`

func TestRewrite(t *testing.T) {
	baseMap := map[string]string{"debian:bookworm-slim": "agentenv-debian:bookworm", "python:3.12": "local/python:3.12"}
	for _, c := range []struct {
		name, src, want string
		args            map[string]string
	}{
		{
			name: "one stage mapped",
			src:  "FROM debian:bookworm-slim\nRUN echo hi\n",
			want: "FROM agentenv-debian:bookworm\n" + testLabel + "\nRUN echo hi\n",
		},
		{
			name: "unmapped kept, keyword case, no final newline",
			src:  "from alpine:3\nRUN true",
			want: "FROM alpine:3\n" + testLabel + "\nRUN true\n",
		},
		{
			name: "platform and AS kept, stage not mapped",
			src:  "FROM --platform=linux/amd64 python:3.12 AS Build\nRUN make\nFROM build\nFROM debian:bookworm-slim AS run\nCOPY --from=build /a /a\n",
			want: "FROM --platform=linux/amd64 local/python:3.12 AS build\n" + testLabel + "\nRUN make\nFROM build\n" + testLabel +
				"\nFROM agentenv-debian:bookworm AS run\n" + testLabel + "\nCOPY --from=build /a /a\n",
		},
		{
			name: "normalized reference",
			src:  "FROM docker.io/library/debian:bookworm-slim\n",
			want: "FROM agentenv-debian:bookworm\n" + testLabel + "\n",
		},
		{
			name: "global arg default",
			src:  "ARG BASE=debian:bookworm-slim\nFROM ${BASE}\n",
			want: "ARG BASE=debian:bookworm-slim\nFROM agentenv-debian:bookworm\n" + testLabel + "\n",
		},
		{
			name: "global arg from the build's arguments",
			src:  "ARG V=3.11\nFROM python:$V\n",
			args: map[string]string{"V": "3.12"},
			want: "ARG V=3.11\nFROM local/python:3.12\n" + testLabel + "\n",
		},
		{
			name: "arg expanded, not mapped: kept as written",
			src:  "ARG V=3\nFROM alpine:$V\n",
			want: "ARG V=3\nFROM alpine:$V\n" + testLabel + "\n",
		},
		{
			name: "continuation and comments",
			src:  "# syntax=docker/dockerfile:1\n# a comment\nFROM \\\n  # inside\n  debian:bookworm-slim \\\n  AS base\nRUN a \\\n  b\n",
			want: "# syntax=docker/dockerfile:1\n# a comment\nFROM agentenv-debian:bookworm AS base\n" + testLabel + "\nRUN a \\\n  b\n",
		},
		{
			name: "escape directive",
			src:  "# escape=`\nFROM debian:bookworm-slim `\n  AS x\n",
			want: "# escape=`\nFROM agentenv-debian:bookworm AS x\n" + testLabel + "\n",
		},
		{
			name: "scratch",
			src:  "FROM scratch\nCOPY a /\n",
			want: "FROM scratch\n" + testLabel + "\nCOPY a /\n",
		},
		{
			name: "CRLF",
			src:  "FROM debian:bookworm-slim\r\nRUN x\r\n",
			want: "FROM agentenv-debian:bookworm\n" + testLabel + "\nRUN x\n",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Rewrite("Dockerfile", []byte(c.src), c.args, baseMap, testLabels)
			if err != nil {
				t.Fatalf("Rewrite: %v", err)
			}
			if string(got) != c.want {
				t.Errorf("Rewrite =\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestRewriteErrors(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"empty", "", "environment/Dockerfile: no FROM line"},
		{"comments only", "# hi\n\n", "environment/Dockerfile: no FROM line"},
		{"no image", "FROM\n", "environment/Dockerfile:1: FROM: want an image"},
		{"flags only", "\n\nFROM --platform=x\n", "environment/Dockerfile:3: FROM: want an image"},
		{"extra words", "FROM a b\n", `environment/Dockerfile:1: FROM: want FROM [--platform=P] IMAGE [AS NAME], got "a b"`},
		{"AS without name", "FROM a AS\n", "environment/Dockerfile:1: FROM: want FROM"},
		{"bad stage name", "FROM a AS 1x\n", `environment/Dockerfile:1: FROM: stage name "1x"`},
		{"stage twice", "FROM a AS x\nFROM b AS x\n", `environment/Dockerfile:2: FROM: stage name "x" is used twice`},
		{"run before from", "ARG X\nRUN x\nFROM a\n", "environment/Dockerfile:2: RUN before the first FROM"},
		{"undeclared arg", "FROM $NOPE\n", `environment/Dockerfile:1: FROM: image "$NOPE": empty`},
		{"bad escape", "# escape=x\nFROM a\n", "environment/Dockerfile:1: escape directive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Rewrite("environment/Dockerfile", []byte(c.src), nil, nil, testLabels)
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, agentenv.ErrInvalid) {
				t.Errorf("Rewrite(%q) = %v, want an ErrInvalid containing %q", c.src, err, c.want)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"debian":                          "docker.io/library/debian:latest",
		"Debian:12":                       "docker.io/library/debian:12",
		"org/app:1":                       "docker.io/org/app:1",
		"ghcr.io/org/app":                 "ghcr.io/org/app:latest",
		"localhost:5000/app:2":            "localhost:5000/app:2",
		"registry:5000/app":               "registry:5000/app:latest",
		"debian@sha256:abc":               "docker.io/library/debian@sha256:abc",
		"docker.io/library/debian:12":     "docker.io/library/debian:12",
		"quay.io/a/b:c@sha256:0123456789": "quay.io/a/b:c@sha256:0123456789",
	} {
		if got := normalize(in); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzRewrite: whatever the Dockerfile, Rewrite does not panic; what it accepts it rewrites
// into a Dockerfile it accepts again, with the same stages, each followed by the label line,
// and with its images mapped once (mapping again changes nothing).
func FuzzRewrite(f *testing.F) {
	f.Add([]byte("FROM debian:bookworm-slim\nRUN echo hi\n"))
	f.Add([]byte("ARG B=a\nFROM --platform=linux/amd64 $B AS one\nFROM one\n"))
	f.Add([]byte("# escape=`\nFROM a `\n AS b\n"))
	f.Add([]byte("FROM \\\n# c\n a\n"))
	baseMap := map[string]string{"a": "mapped-a", "debian:bookworm-slim": "agentenv-debian:bookworm"}
	f.Fuzz(func(t *testing.T, src []byte) {
		out, err := Rewrite("Dockerfile", src, nil, baseMap, testLabels)
		if err != nil {
			if !errors.Is(err, agentenv.ErrInvalid) {
				t.Fatalf("Rewrite error %v does not wrap ErrInvalid", err)
			}
			return
		}
		d1, err := parse("Dockerfile", src, nil, baseMap)
		if err != nil {
			t.Fatalf("parse failed after Rewrite succeeded: %v", err)
		}
		d2, err := parse("Dockerfile", out, nil, baseMap)
		if err != nil {
			t.Fatalf("Rewrite's output does not parse: %v\n%s", err, out)
		}
		if len(d1.stages) != len(d2.stages) {
			t.Fatalf("Rewrite's output has %d stages, the input %d:\n%s", len(d2.stages), len(d1.stages), out)
		}
		for i, st := range d2.stages {
			if st.base != d1.stages[i].base || st.name != d1.stages[i].name {
				t.Errorf("stage %d: base %q name %q after rewrite, want %q %q", i, st.base, st.name, d1.stages[i].base, d1.stages[i].name)
			}
			if got := d2.lines[st.last+1]; !strings.HasPrefix(got, "LABEL ") {
				t.Errorf("stage %d: line after FROM is %q, want the LABEL", i, got)
			}
		}
	})
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"echo", "a", "b"}, &out); err != nil || out.String() != "a b\n" {
		t.Errorf("echo = %q, %v", out.String(), err)
	}
	var code exitCode
	if err := run(t.Context(), []string{"exit", "7"}, &out); !errors.As(err, &code) || code != 7 {
		t.Errorf("exit 7 = %v, want exitCode 7", err)
	}
	for _, args := range [][]string{nil, {"bogus"}, {"exit"}, {"exit", "x"}, {"write", "only-path"}, {"alloc", "-1"}, {"alloc", "x"}, {"id", "x"}} {
		if err := run(t.Context(), args, &out); !errors.Is(err, errUsage) {
			t.Errorf("run(%q) = %v, want usage", args, err)
		}
	}
	file := filepath.Join(t.TempDir(), "a", "b.txt")
	if err := run(t.Context(), []string{"write", file, "text"}, &out); err != nil {
		t.Fatalf("write: %v", err)
	}
	out.Reset()
	if err := run(t.Context(), []string{"cat", file}, &out); err != nil || out.String() != "text" {
		t.Errorf("cat = %q, %v", out.String(), err)
	}
	if err := run(t.Context(), []string{"cat", file + ".missing"}, &out); err == nil {
		t.Errorf("cat of a missing file = nil error")
	}
	out.Reset()
	if err := run(t.Context(), []string{"alloc", "2"}, &out); err != nil || out.String() != "allocated\n" {
		t.Errorf("alloc 2 = %q, %v", out.String(), err)
	}
	out.Reset()
	if err := run(t.Context(), []string{"id"}, &out); err != nil || out.String() != fmt.Sprintf("%d:%d\n", os.Getuid(), os.Getgid()) {
		t.Errorf("id = %q, %v", out.String(), err)
	}
}

func TestServe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	errc := make(chan error, 1)
	go func() { errc <- run(t.Context(), []string{"serve", addr}, nil) }()
	deadline := time.Now().Add(5 * time.Second)
	for _, path := range []string{"/", "/healthz"} {
		for {
			var out bytes.Buffer
			err := run(t.Context(), []string{"get", "http://" + addr + path}, &out)
			if err == nil && out.String() == "ok" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s = %q, %v", path, out.String(), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	resp, err := http.Get("http://" + addr + "/nothing")
	if err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing = %v, %v; want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	if err := run(t.Context(), []string{"get", "http://" + addr + "/nothing"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("get of a 404 = %v, want an error naming 404", err)
	}
}

package images_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentenv/agentenv/images"
)

// untar returns name -> (mode, contents) of a tar archive.
func untar(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = h.FileInfo().Mode().String() + " " + string(b)
	}
}

func TestContext(t *testing.T) {
	dir := t.TempDir()
	bin, ca := filepath.Join(dir, "bin"), filepath.Join(dir, "ca.crt")
	os.WriteFile(bin, []byte("BIN"), 0o755)
	os.WriteFile(ca, []byte("CA"), 0o644)

	ctx, err := images.Context(images.Spec{Tag: "x:1", Binary: bin, Entrypoint: []string{"/agentenv", "gateway"}}, ca)
	if err != nil {
		t.Fatalf("Context: %v", err)
	}
	outer := untar(t, ctx)
	if got, want := outer["Dockerfile"], "-rw-r--r-- FROM scratch\nADD rootfs.tar /\nUSER 65532:65532\nENTRYPOINT [\"/agentenv\",\"gateway\"]\n"; got != want {
		t.Errorf("Dockerfile = %q, want %q", got, want)
	}
	rootfs := untar(t, []byte(strings.TrimPrefix(outer["rootfs.tar"], "-rw-r--r-- ")))
	want := map[string]string{
		"agentenv":                          "-rwxr-xr-x BIN",
		"tmp/":                              "dtrwxrwxrwx ",
		"etc/":                              "drwxr-xr-x ",
		"etc/ssl/":                          "drwxr-xr-x ",
		"etc/ssl/certs/":                    "drwxr-xr-x ",
		"etc/ssl/certs/ca-certificates.crt": "-rw-r--r-- CA",
	}
	if diff := cmp.Diff(want, rootfs); diff != "" {
		t.Errorf("rootfs.tar (-want +got):\n%s", diff)
	}

	// Without a CA bundle on the host, the image has none; with no entrypoint, the command
	// defaults to the binary, so a container's command is its whole argv.
	ctx, err = images.Context(images.Spec{Tag: "x:1", Binary: bin}, filepath.Join(dir, "absent.crt"))
	if err != nil {
		t.Fatalf("Context without CA: %v", err)
	}
	outer = untar(t, ctx)
	if strings.Contains(outer["Dockerfile"], "ENTRYPOINT") || !strings.Contains(outer["Dockerfile"], `CMD ["/agentenv"]`) || strings.Contains(outer["rootfs.tar"], "ca-certificates") {
		t.Errorf("Context without CA: Dockerfile %q, rootfs mentions CA: %v", outer["Dockerfile"], strings.Contains(outer["rootfs.tar"], "ca-certificates"))
	}
	if _, err := images.Context(images.Spec{Tag: "x:1", Binary: filepath.Join(dir, "missing")}, ""); err == nil {
		t.Errorf("Context(missing binary) = nil error")
	}
}

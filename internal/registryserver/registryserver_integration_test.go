//go:build integration

package registryserver_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/internal/registryserver"
)

var client = &http.Client{Timeout: 10 * time.Second}

// do sends a request, with basic auth when user is set, and returns its response (body read
// and closed).
func do(t *testing.T, method, u string, body []byte, user, password string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// TestWithoutAuth: /v2/ answers 200 to anyone; a blob pushed lands, byte for byte, at
// BlobPath; Stop stops the registry and may be called again.
func TestWithoutAuth(t *testing.T) {
	s := registryserver.Start(t, registryserver.Options{})
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Errorf("Addr %q, want 127.0.0.1:PORT", s.Addr)
	}
	base := "http://" + s.Addr
	if resp := do(t, http.MethodGet, base+"/v2/", nil, "", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v2/ = %d, want 200", resp.StatusCode)
	}

	blob := []byte("agentenv registryserver blob\n")
	sum := sha256.Sum256(blob)
	dgst := "sha256:" + hex.EncodeToString(sum[:])
	pushBlob(t, base, "kit/test", dgst, blob, "", "")
	got, err := os.ReadFile(s.BlobPath(dgst))
	if err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("BlobPath(%s): %q, %v; want the pushed bytes", dgst, got, err)
	}

	s.Stop(t)
	if resp, err := client.Get(base + "/v2/"); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("GET /v2/ after Stop answered %d, want no answer", resp.StatusCode)
	}
	s.Stop(t) // idempotent
}

// TestWithAuth: /v2/ answers 401 with the realm's Basic challenge without credentials or with a
// wrong password, 200 with the right ones; a push needs them.
func TestWithAuth(t *testing.T) {
	s := registryserver.Start(t, registryserver.Options{User: "alice", Password: "pa:ss w0rd"})
	base := "http://" + s.Addr
	resp := do(t, http.MethodGet, base+"/v2/", nil, "", "")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v2/ without credentials = %d, want 401", resp.StatusCode)
	}
	if got, want := resp.Header.Get("WWW-Authenticate"), `Basic realm="`+registryserver.Realm+`"`; got != want {
		t.Errorf("WWW-Authenticate %q, want %q", got, want)
	}
	if resp := do(t, http.MethodGet, base+"/v2/", nil, "alice", "wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v2/ with a wrong password = %d, want 401", resp.StatusCode)
	}
	if resp := do(t, http.MethodGet, base+"/v2/", nil, "bob", "pa:ss w0rd"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v2/ as an unknown user = %d, want 401", resp.StatusCode)
	}
	if resp := do(t, http.MethodGet, base+"/v2/", nil, "alice", "pa:ss w0rd"); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v2/ with the credentials = %d, want 200", resp.StatusCode)
	}
	if resp := do(t, http.MethodPost, base+"/v2/kit/test/blobs/uploads/", nil, "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST an upload without credentials = %d, want 401", resp.StatusCode)
	}
	blob := []byte("authenticated blob\n")
	sum := sha256.Sum256(blob)
	dgst := "sha256:" + hex.EncodeToString(sum[:])
	pushBlob(t, base, "kit/test", dgst, blob, "alice", "pa:ss w0rd")
	if _, err := os.Stat(s.BlobPath(dgst)); err != nil {
		t.Errorf("pushed blob not at BlobPath: %v", err)
	}
}

// TestTwoServersApart: two registries of one test have their own ports and storage.
func TestTwoServersApart(t *testing.T) {
	a := registryserver.Start(t, registryserver.Options{})
	b := registryserver.Start(t, registryserver.Options{})
	if a.Addr == b.Addr || a.Root == b.Root {
		t.Fatalf("two servers share %s / %s", a.Addr, a.Root)
	}
	a.Stop(t)
	if resp := do(t, http.MethodGet, "http://"+b.Addr+"/v2/", nil, "", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("the second server answered %d after the first stopped, want 200", resp.StatusCode)
	}
}

// pushBlob uploads blob to repository repo monolithically (POST, then PUT with the digest).
func pushBlob(t *testing.T, base, repo, dgst string, blob []byte, user, password string) {
	t.Helper()
	resp := do(t, http.MethodPost, base+"/v2/"+repo+"/blobs/uploads/", nil, user, password)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST upload = %d, want 202", resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatalf("upload Location %q: %v", resp.Header.Get("Location"), err)
	}
	u, _ := url.Parse(base)
	loc = u.ResolveReference(loc)
	q := loc.Query()
	q.Set("digest", dgst)
	loc.RawQuery = q.Encode()
	if resp := do(t, http.MethodPut, loc.String(), blob, user, password); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT blob %s = %d, want 201", dgst, resp.StatusCode)
	}
}

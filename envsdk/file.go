package envsdk

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/agentenv/agentenv/envproto"
)

// FileTimeout bounds the fetch of a file part's http(s) URI by [ReadFile].
const FileTimeout = 60 * time.Second

// ReadFile returns the content of a file part's file, at most [MaxDataBodyBytes]: its inline
// bytes, the file a file:// URI names on this server's filesystem, or the body of an http(s)
// URI (such as a signed URL) fetched with hc (nil takes a client of its own) within
// [FileTimeout]. A data/add handler calls it for each file part it takes.
func ReadFile(ctx context.Context, hc *http.Client, f *envproto.FilePart) ([]byte, error) {
	if f == nil {
		return nil, fmt.Errorf("read file: no file")
	}
	if f.URI == "" {
		return f.Bytes, nil
	}
	u, err := url.Parse(f.URI)
	if err != nil {
		return nil, fmt.Errorf("read file %q: %w", f.URI, err)
	}
	switch f.URIScheme() {
	case "file":
		fh, err := os.Open(u.Path)
		if err != nil {
			return nil, fmt.Errorf("read file: %w", err)
		}
		defer fh.Close()
		return readBounded(fh, f.URI)
	case "http", "https":
		if hc == nil {
			hc = &http.Client{}
		}
		ctx, cancel := context.WithTimeout(ctx, FileTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URI, nil)
		if err != nil {
			return nil, fmt.Errorf("read file %q: %w", redact(u), err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("read file %q: %w", redact(u), err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("read file %q: %s", redact(u), resp.Status)
		}
		return readBounded(resp.Body, redact(u))
	}
	return nil, fmt.Errorf("read file %q: want file://, http:// or https://", f.URI)
}

// redact drops a URL's query, where a signed URL carries its signature.
func redact(u *url.URL) string {
	c := *u
	c.RawQuery, c.User = "", nil
	return c.String()
}

func readBounded(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxDataBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read file %q: %w", name, err)
	}
	if len(b) > MaxDataBodyBytes {
		return nil, fmt.Errorf("read file %q: larger than %d bytes", name, MaxDataBodyBytes)
	}
	return b, nil
}

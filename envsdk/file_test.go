package envsdk_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envsdk"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "seed.txt")
	if err := os.WriteFile(path, []byte("from disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/seed.json" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("from a signed url"))
	}))
	t.Cleanup(srv.Close)
	for _, tt := range []struct {
		name string
		file envproto.FilePart
		want string
		err  string
	}{
		{"inline", envproto.FilePart{Bytes: []byte("inline")}, "inline", ""},
		{"file uri", envproto.FilePart{URI: "file://" + path}, "from disk", ""},
		{"http url", envproto.FilePart{URI: srv.URL + "/seed.json?X-Amz-Signature=secret"}, "from a signed url", ""},
		{"http 404 hides the query", envproto.FilePart{URI: srv.URL + "/gone?X-Amz-Signature=secret"}, "", "404"},
		{"missing file", envproto.FilePart{URI: "file://" + filepath.Join(dir, "none")}, "", "no such file"},
		{"other scheme", envproto.FilePart{URI: "s3://bucket/key"}, "", "want file://"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := envsdk.ReadFile(t.Context(), nil, &tt.file)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "secret") {
					t.Errorf("err = %v, want it to say %q and not the signature", err, tt.err)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Errorf("ReadFile = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFilePartValidation(t *testing.T) {
	s := envsdk.New(envsdk.Options{Name: "files"})
	s.HandleAdd(func(context.Context, []envproto.Part) error { return nil })
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for _, tt := range []struct {
		name, part string
		code       int
	}{
		{"inline bytes", `{"kind":"file","file":{"bytes":"aGk=","mimeType":"text/plain"}}`, 0},
		{"file uri", `{"kind":"file","file":{"uri":"file:///data/x.zip"}}`, 0},
		{"https uri", `{"kind":"file","file":{"uri":"https://b.example/x?sig=1","name":"x"}}`, 0},
		{"both", `{"kind":"file","file":{"bytes":"aGk=","uri":"file:///x"}}`, envproto.CodeInvalidParams},
		{"ftp", `{"kind":"file","file":{"uri":"ftp://h/x"}}`, envproto.CodeInvalidParams},
		{"legacy mime_type", `{"kind":"file","file":{"name":"a.csv","mime_type":"text/csv","bytes":"YSxi"}}`, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, resp, raw := post(t, ts.URL, `{"jsonrpc":"2.0","id":1,"method":"data/add","params":{"parts":[`+tt.part+`]}}`)
			switch {
			case tt.code == 0 && resp.Error != nil:
				t.Errorf("refused: %s", raw)
			case tt.code != 0 && (resp.Error == nil || resp.Error.Code != tt.code):
				t.Errorf("response %s, want error %d", raw, tt.code)
			}
		})
	}
}

package envsdk_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentenv/agentenv/envproto"
)

// FuzzDataPlane feeds arbitrary bodies to POST /agentenv. Whatever the body, the answer is 204
// with no body, or 200 with one JSON-RPC 2.0 response carrying exactly one of result and error,
// and error codes from the data plane's set. Seeds are in testdata/fuzz/FuzzDataPlane.
func FuzzDataPlane(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"data/add","params":{"parts":[{"kind":"text","text":"a"}]}}`))
	s, _ := testServer(f)
	h := s.Handler()
	codes := map[int]bool{
		envproto.CodeParseError: true, envproto.CodeInvalidRequest: true, envproto.CodeMethodNotFound: true,
		envproto.CodeInvalidParams: true, envproto.CodeInternalError: true, envproto.CodeServerError: true,
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, envproto.DataPath, bytes.NewReader(body)))
		switch rec.Code {
		case http.StatusNoContent:
			if rec.Body.Len() != 0 {
				t.Fatalf("204 with body %q", rec.Body.Bytes())
			}
			return
		case http.StatusOK:
		default:
			t.Fatalf("status %d for body %q", rec.Code, body)
		}
		var resp envproto.Response
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("response %q is not JSON: %v", rec.Body.Bytes(), err)
		}
		if resp.JSONRPC != "2.0" {
			t.Fatalf("response %q: jsonrpc is not 2.0", rec.Body.Bytes())
		}
		if (resp.Error == nil) == (resp.Result == nil) {
			t.Fatalf("response %q: want exactly one of result and error", rec.Body.Bytes())
		}
		if resp.Error != nil && !codes[resp.Error.Code] {
			t.Fatalf("response %q: unexpected error code", rec.Body.Bytes())
		}
	})
}

package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentenv/agentenv/gateway"
)

// FuzzStep feeds arbitrary bodies to /step, /tools/disable and /tools/enable: every answer must
// be a JSON object with an expected status, never a panic or a 500.
func FuzzStep(f *testing.F) {
	for _, s := range []string{
		`{"tool":"echo","arguments":{"text":"x"}}`,
		`{"list_tools":true}`,
		`{"role":"agent","tools":["ec*"]}`,
		`{"tool":"echo","arguments":[1]}`,
		`{"tool":"","list_tools":true}`,
		`{}`, `null`, `{"tools":["*"]}{}`,
	} {
		f.Add(s, uint8(0))
	}
	_, gw := newGateway(f, gateway.Config{}, newBackend(f, "a", false, "echo"))
	h := gw.Config.Handler
	f.Fuzz(func(t *testing.T, body string, route uint8) {
		path := []string{"/step", "/tools/disable", "/tools/enable"}[int(route)%3]
		req := httptest.NewRequestWithContext(t.Context(), "POST", path, bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound, http.StatusBadGateway:
		default:
			t.Fatalf("POST %s %q: status %d: %s", path, body, rec.Code, rec.Body)
		}
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("POST %s %q: answer is not a JSON object: %v: %s", path, body, err, rec.Body)
		}
		if rec.Code != http.StatusOK && v["error"] == nil {
			t.Fatalf("POST %s %q: status %d without an error field: %s", path, body, rec.Code, rec.Body)
		}
	})
}

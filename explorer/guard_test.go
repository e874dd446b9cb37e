package explorer_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/explorer"
)

// do sends a request with the given headers and returns the status.
func do(t *testing.T, r *rig, method, path string, h map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, r.srv.URL+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp
}

func csrfOf(t *testing.T, r *rig, h map[string]string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", r.srv.URL+"/api/v1/session", nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct{ CSRF string }
	if err := jsonDecode(resp, &s); err != nil || s.CSRF == "" {
		t.Fatalf("session = %+v, %v", s, err)
	}
	return s.CSRF
}

func TestGuard(t *testing.T) {
	col := &fakeCollector{}
	r := newRig(t, explorer.Config{Collector: col})
	csrf := csrfOf(t, r, nil)

	if resp := do(t, r, "GET", "/", nil); resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") != explorer.ContentSecurityPolicy {
		t.Errorf("GET / = %d with CSP %q, want 200 with %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"), explorer.ContentSecurityPolicy)
	}
	for _, csp := range []string{"script-src 'self'", "default-src 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(explorer.ContentSecurityPolicy, csp) || strings.Contains(explorer.ContentSecurityPolicy, "unsafe-inline") {
			t.Errorf("CSP lacks %q or allows unsafe-inline", csp)
		}
	}
	for _, tc := range []struct {
		name, method, path string
		h                  map[string]string
		want               int
	}{
		{"foreign Host (DNS rebinding)", "GET", "/", map[string]string{"Host": "evil.example:80"}, http.StatusMisdirectedRequest},
		{"foreign Host on the API", "GET", "/api/v1/runs", map[string]string{"Host": "attacker.test"}, http.StatusMisdirectedRequest},
		{"foreign Host with this port", "GET", "/api/v1/session", map[string]string{"Host": "evil.example:" + strings.Split(r.host, ":")[1]}, http.StatusMisdirectedRequest},
		{"localhost is allowed", "GET", "/", map[string]string{"Host": "localhost:" + strings.Split(r.host, ":")[1]}, http.StatusOK},
		{"cross-site POST", "POST", "/api/v1/gc", map[string]string{"Sec-Fetch-Site": "cross-site", "X-CSRF-Token": csrf}, http.StatusForbidden},
		{"same-site POST", "POST", "/api/v1/gc", map[string]string{"Sec-Fetch-Site": "same-site", "X-CSRF-Token": csrf}, http.StatusForbidden},
		{"foreign Origin POST", "POST", "/api/v1/gc", map[string]string{"Origin": "http://evil.example", "X-CSRF-Token": csrf}, http.StatusForbidden},
		{"same-origin POST without CSRF", "POST", "/api/v1/gc", map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusForbidden},
		{"same-origin POST with a wrong CSRF", "POST", "/api/v1/gc", map[string]string{"Sec-Fetch-Site": "same-origin", "X-CSRF-Token": "x" + csrf}, http.StatusForbidden},
		{"form POST from elsewhere", "POST", "/api/v1/runs", map[string]string{"Origin": "null", "Content-Type": "application/x-www-form-urlencoded"}, http.StatusForbidden},
		{"same-origin POST with CSRF", "POST", "/api/v1/gc", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + r.host, "X-CSRF-Token": csrf}, http.StatusOK},
		{"script POST with CSRF", "POST", "/api/v1/gc", map[string]string{"X-CSRF-Token": csrf}, http.StatusOK},
	} {
		if resp := do(t, r, tc.method, tc.path, tc.h); resp.StatusCode != tc.want {
			t.Errorf("%s: %s %s = %d, want %d", tc.name, tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
	if len(col.calls) != 2 || col.calls[0].DryRun {
		t.Errorf("gc ran %+v, want twice for real (only the two allowed POSTs)", col.calls)
	}
}

func TestToken(t *testing.T) {
	r := newRig(t, explorer.Config{Token: "s3cret"})
	for _, tc := range []struct {
		name string
		path string
		h    map[string]string
		want int
	}{
		{"no token", "/", nil, http.StatusUnauthorized},
		{"no token on the API", "/api/v1/runs", nil, http.StatusUnauthorized},
		{"no token on the assets", "/static/app.js", nil, http.StatusUnauthorized},
		{"no token on events", "/api/v1/events", nil, http.StatusUnauthorized},
		{"wrong bearer", "/api/v1/runs", map[string]string{"Authorization": "Bearer nope"}, http.StatusUnauthorized},
		{"bearer", "/api/v1/runs", map[string]string{"Authorization": "Bearer s3cret"}, http.StatusOK},
		{"cookie", "/runs", map[string]string{"Cookie": "agentenv_ui_token=s3cret"}, http.StatusOK},
		{"wrong ?token", "/?token=nope", nil, http.StatusUnauthorized},
		{"?token sets the cookie", "/runs?token=s3cret", nil, http.StatusSeeOther},
	} {
		resp := do(t, r, "GET", tc.path, tc.h)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: GET %s = %d, want %d", tc.name, tc.path, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusSeeOther {
			if loc := resp.Header.Get("Location"); loc != "/runs" {
				t.Errorf("?token redirects to %q, want /runs (the token out of the URL)", loc)
			}
			if c := resp.Cookies(); len(c) != 1 || c[0].Value != "s3cret" || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode {
				t.Errorf("?token cookies = %v, want one HttpOnly SameSite=Strict", c)
			}
		}
	}
	// Host is checked before the token: a rebinding page gets 421 even with a token.
	if resp := do(t, r, "GET", "/", map[string]string{"Host": "evil.example", "Authorization": "Bearer s3cret"}); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("foreign Host with token = %d, want 421", resp.StatusCode)
	}
}

func TestHosts(t *testing.T) {
	got, err := explorer.Hosts("127.0.0.1:8234", "ui.example")
	if err != nil {
		t.Fatal(err)
	}
	want := "127.0.0.1:8234 [::1]:8234 localhost:8234 ui.example:8234"
	if strings.Join(got, " ") != want {
		t.Errorf("Hosts = %v, want %s", got, want)
	}
	if h, _ := explorer.Hosts("10.1.2.3:80"); strings.Join(h, " ") != "10.1.2.3:80" {
		t.Errorf("Hosts(10.1.2.3:80) = %v, want only itself", h)
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, "0.0.0.0:1": false, ":1": false, "10.0.0.1:1": false} {
		if explorer.Loopback(addr) != want {
			t.Errorf("Loopback(%s) = %v, want %v", addr, !want, want)
		}
	}
}

package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/gateway"
)

// A website is served at /website/<name>/ with its prefix stripped, to the admin token and to
// role tokens whose role does not disable website.<name>; it is in the card, /state and the
// list_website_urls tool, and an upgrade passes through.
func TestGateway_Website(t *testing.T) {
	var gotAuth, gotPath, gotQuery, gotRole, gotPrefix string
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" { // a minimal upgrade: echo one line back
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "echo")
			w.WriteHeader(http.StatusSwitchingProtocols)
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			line, _ := rw.ReadString('\n')
			_, _ = rw.WriteString("echo " + line)
			_ = rw.Flush()
			return
		}
		gotAuth, gotPath, gotQuery = r.Header.Get("Authorization"), r.URL.Path, r.URL.RawQuery
		gotRole, gotPrefix = r.Header.Get(gateway.RoleHeader), r.Header.Get("X-Forwarded-Prefix")
		_, _ = w.Write([]byte("<html>shop</html>"))
	}))
	t.Cleanup(site.Close)
	b := newBackend(t, "kv", false, "echo")
	_, srv := newGateway(t, gateway.Config{
		Websites:   []gateway.Backend{{Name: "shop", URL: site.URL}},
		PublicURL:  "http://gateway:8080",
		RoleTokens: map[string]string{"agent": "agent-token", "reader": "reader-token"},
		Roles:      map[string][]string{"reader": {"website.*"}},
	}, b)

	code, body, _ := do(t, "GET", srv.URL+"/website/shop/items/1?x=y", testToken, nil, nil)
	if code != http.StatusOK || string(body) != "<html>shop</html>" {
		t.Fatalf("/website/shop/items/1: %d %s", code, body)
	}
	if gotAuth != "" || gotPath != "/items/1" || gotQuery != "x=y" || gotPrefix != "/website/shop" {
		t.Errorf("the site got auth %q path %q query %q prefix %q", gotAuth, gotPath, gotQuery, gotPrefix)
	}
	if code, _, _ := do(t, "GET", srv.URL+"/website/shop/", "agent-token", nil, nil); code != http.StatusOK || gotRole != "agent" {
		t.Errorf("role token agent: %d, role %q; want 200 as agent", code, gotRole)
	}
	for _, c := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {"reader-token", http.StatusForbidden}} {
		if code, _, _ := do(t, "GET", srv.URL+"/website/shop/", c.token, nil, nil); code != c.want {
			t.Errorf("token %q: %d, want %d", c.token, code, c.want)
		}
	}
	if code, _, _ := do(t, "GET", srv.URL+"/website/nope/", testToken, nil, nil); code != http.StatusNotFound {
		t.Errorf("an unknown website: %d, want 404", code)
	}

	// An upgrade (what a WebSocket does) passes through.
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(srv.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = conn.Write([]byte("GET /website/shop/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\nAuthorization: Bearer " + testToken + "\r\n\r\n"))
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	_, _ = conn.Write([]byte("hello\n"))
	if line, _ := rd.ReadString('\n'); line != "echo hello\n" {
		t.Errorf("upgraded stream answered %q", line)
	}

	code, body, _ = do(t, "GET", srv.URL+envproto.CardPath, testToken, nil, nil)
	if code != http.StatusOK || !strings.Contains(string(body), gateway.WebsitesExtension) || !strings.Contains(string(body), `"/website/shop/"`) {
		t.Errorf("card: %d %s", code, body)
	}
	var st gateway.State
	code, body, _ = do(t, "GET", srv.URL+gateway.StatePath, testToken, nil, nil)
	if err := json.Unmarshal(body, &st); err != nil || code != http.StatusOK {
		t.Fatalf("/state: %d %v", code, err)
	}
	if want := []gateway.WebsiteState{{Name: "shop", Path: "/website/shop/", URL: "http://gateway:8080/website/shop/", Upstream: site.URL}}; !slices.Equal(st.Websites, want) {
		t.Errorf("/state websites = %+v, want %+v", st.Websites, want)
	}

	cs := connect(t, srv.URL, "", nil)
	if names := listNames(t, cs); !slices.Contains(names, gateway.ListWebsiteURLsTool) {
		t.Fatalf("tools %v lack %s", names, gateway.ListWebsiteURLsTool)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: gateway.ListWebsiteURLsTool})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %v", err, res)
	}
	if got, want := resultText(res), `{"websites":[{"name":"shop","url":"http://gateway:8080/website/shop/","env_url":"`+site.URL+`/"}]}`; got != want {
		t.Errorf("list_website_urls = %s, want %s", got, want)
	}

	_, err = gateway.New(ctx, gateway.Config{Token: "x", Servers: []gateway.Backend{{Name: "kv", URL: b.url}}, Websites: []gateway.Backend{{Name: "kv", URL: site.URL}}})
	if err == nil || !strings.Contains(err.Error(), "unique name") {
		t.Errorf("a website named as a server: %v", err)
	}
}

// A person's browser opens a website with the admin token once in the query: it gets a cookie
// for that website alone, which then opens every method there (the site's forms), from the
// gateway's own origin, and reaches the site without the gateway's cookie but with the site's
// own; it opens nothing else.
func TestGateway_WebsiteCookieLogin(t *testing.T) {
	var gotMethod, gotCookie string
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotMethod, gotCookie = r.Method, r.Header.Get("Cookie")
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(site.Close)
	_, srv := newGateway(t, gateway.Config{
		Websites:   []gateway.Backend{{Name: "shop", URL: site.URL}, {Name: "other", URL: site.URL}},
		RoleTokens: map[string]string{"agent": "agent-token"},
	}, newBackend(t, "kv", false, "echo"))
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string, cookies []*http.Cookie, origin string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	resp := send("GET", "/website/shop/?"+gateway.SvcTokenParam+"="+testToken, nil, "")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/website/shop/" {
		t.Fatalf("login: %d to %q, want 303 to the page without the token", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || cookies[0].Path != "/website/shop/" || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login cookies %+v, want one HttpOnly, strict, for /website/shop/ alone", cookies)
	}
	withSite := append(slices.Clone(cookies), &http.Cookie{Name: "cart", Value: "2"})
	if r := send("POST", "/website/shop/order", withSite, srv.URL); r.StatusCode != http.StatusOK || gotMethod != "POST" || gotCookie != "cart=2" {
		t.Errorf("same-origin POST with the cookie: %d, the site got %s with Cookie %q; want 200, POST, cart=2 alone", r.StatusCode, gotMethod, gotCookie)
	}
	if r := send("POST", "/website/shop/order", cookies, "http://evil.example"); r.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST with the cookie: %d, want 403", r.StatusCode)
	}
	for _, path := range []string{"/website/other/", "/state", "/svc/db-web/"} {
		if r := send("GET", path, cookies, ""); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with the shop's cookie: %d, want 401", path, r.StatusCode)
		}
	}
	if r := send("GET", "/website/shop/?"+gateway.SvcTokenParam+"=agent-token", nil, ""); r.StatusCode != http.StatusUnauthorized || len(r.Cookies()) != 0 {
		t.Errorf("login with a role token: %d cookies %v, want 401 and none", r.StatusCode, r.Cookies())
	}
}

//go:build integration

package deploy_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/gateway"
	"github.com/agentenv/agentenv/spec"
)

// shopEnv is examples/shop/env.yaml with this checkout's images.
func (r *rig) shopEnv() *spec.Env { return r.shopFile("../examples/shop/env.yaml") }

// shopFile is the shop env file at path with this checkout's images.
func (r *rig) shopFile(path string) *spec.Env {
	r.t.Helper()
	env, err := spec.Load(path)
	if err != nil {
		r.t.Fatal(err)
	}
	env.Websites[0].Backend.Image = r.runtime
	env.ServiceDB.Image = postgresImage
	env.ServiceDB.DBMCP.Image = r.runtime
	env.Gateway.Image = r.runtime
	return env
}

// get sends method to the deployment's gateway at path with token ("" for none) and returns
// the status and body; a redirect is returned as it is.
func get(t *testing.T, res *deploy.Result, method, path, token string, form url.Values) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(res.GatewayURL, "/mcp")+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestWebsiteShop deploys examples/shop: its page through the gateway with the admin token
// (and with no token or a role kept out, refused); an order placed through the page lands in
// the website's schema, where the verifiers' role reads it; the card, /state and
// list_website_urls name the website; teardown leaves nothing.
func TestWebsiteShop(t *testing.T) {
	r := newRig(t, nil)
	var down time.Time
	t.Cleanup(func() { t.Logf("teardown and leftover check took %s", time.Since(down).Round(time.Millisecond)) })
	start := time.Now()
	res, cs := r.deployAndConnect(r.shopEnv())
	t.Cleanup(func() { down = time.Now() })
	t.Logf("shop ready in %s", time.Since(start).Round(time.Millisecond))

	code, page := get(t, res, "GET", "/website/shop/", res.Token, nil)
	if code != http.StatusOK || !strings.Contains(page, "<h1>Shop</h1>") || !strings.Contains(page, "Blue mug") {
		t.Fatalf("GET /website/shop/ with the admin token: %d\n%s", code, page)
	}
	if code, _ := get(t, res, "GET", "/website/shop/", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /website/shop/ without a token: %d, want 401", code)
	}
	if code, _ := get(t, res, "GET", "/website/shop/", res.Tokens["visitor"], nil); code != http.StatusForbidden {
		t.Errorf("GET /website/shop/ as visitor (website.* disabled): %d, want 403", code)
	}
	if code, _ := get(t, res, "GET", "/website/shop/", res.Tokens["default"], nil); code != http.StatusOK {
		t.Errorf("GET /website/shop/ with the default role's token: %d, want 200", code)
	}

	code, _ = get(t, res, "POST", "/website/shop/orders", res.Token, url.Values{"product": {"2"}, "quantity": {"3"}})
	if code != http.StatusSeeOther {
		t.Errorf("POST an order: %d, want 303", code)
	}
	if _, page := get(t, res, "GET", "/website/shop/", res.Token, nil); !strings.Contains(page, "3 × Notebook") {
		t.Errorf("the page does not list the order:\n%s", page)
	}
	conn, err := pgx.Connect(t.Context(), res.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var qty int
	if err := conn.QueryRow(t.Context(), "SELECT sum(quantity) FROM shop.orders").Scan(&qty); err != nil || qty != 3 {
		t.Errorf("the verifier reads shop.orders: %d, %v; want 3", qty, err)
	}
	if _, err := conn.Exec(t.Context(), "DELETE FROM shop.orders"); err == nil {
		t.Errorf("the verifier role deleted the website's orders")
	}

	_, card := get(t, res, "GET", envproto.CardPath, res.Token, nil)
	if !strings.Contains(card, gateway.WebsitesExtension) || !strings.Contains(card, `"/website/shop/"`) {
		t.Errorf("the card does not list the website:\n%s", card)
	}
	var st gateway.State
	_, body := get(t, res, "GET", gateway.StatePath, res.Token, nil)
	if err := json.Unmarshal([]byte(body), &st); err != nil || len(st.Websites) != 1 || st.Websites[0].URL != "http://gateway:8080/website/shop/" {
		t.Errorf("/state websites: %+v (%v)", st.Websites, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: gateway.ListWebsiteURLsTool})
	if err != nil || out.IsError || !strings.Contains(out.Content[0].(*mcp.TextContent).Text, "http://gateway:8080/website/shop/") {
		t.Errorf("list_website_urls: %v %+v", err, out)
	}
	if u := res.Doc.URLs["shop"]; !strings.HasSuffix(u, "/website/shop/") {
		t.Errorf("the deployment's URL of the shop: %q", u)
	}
	openShopInChromium(t, res)
}

// TestWebsiteNeverReady deploys a website whose ready_path never answers 2xx: the deploy fails
// within its ready_timeout naming the website, and leaves nothing.
func TestWebsiteNeverReady(t *testing.T) {
	r := newRig(t, nil)
	env := r.parse("slow", `name: slow
websites:
  - name: slow
    backend:
      image: `+r.test+`
      command: [serve, ":8080"]
      port: 8080
      ready_path: /never
      ready_timeout: 8s
gateway:
  image: `+r.runtime+`
`)
	id := r.name()
	start := time.Now()
	_, err := r.d.Deploy(t.Context(), env, deploy.Options{Provider: "docker", Name: id})
	if err == nil {
		teardown(t, r, id)
		t.Fatal("deployed a website that is never ready")
	}
	if took := time.Since(start); took > 45*time.Second {
		t.Errorf("the deploy failed after %s, want about the 8s ready_timeout", took)
	}
	for _, want := range []string{"website slow", "not ready within 8s", "/never", "404"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if left := r.leftovers(id); len(left) > 0 {
		t.Errorf("a failed deploy left %v", left)
	}
}

// TestWebsiteShopStoreSnapshot: the shop's schema is state like a server's: deployed on a
// state store, an order placed through the gateway is in a snapshot of it, a deploy from that
// snapshot shows it, and the website's role still owns its restored tables (it orders again).
func TestWebsiteShopStoreSnapshot(t *testing.T) {
	s := newStoreRig(t, nil)
	r := s.rig
	src := r.name()
	res, err := r.d.Deploy(t.Context(), r.shopEnv(), deploy.Options{Provider: "docker", Name: src, Store: s.store})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, res, "POST", "/website/shop/orders", res.Token, url.Values{"product": {"1"}, "quantity": {"2"}}); code != http.StatusSeeOther {
		t.Fatalf("POST an order: %d, want 303", code)
	}
	name := "shop-" + strings.TrimPrefix(r.name(), "dep-")
	if _, err := r.d.Snapshot(t.Context(), src, name, s.store); err != nil {
		t.Fatal(err)
	}
	assertReceiptClean(t, teardown(t, r, src), false)

	env := r.shopEnv()
	env.ServiceDB.FromSnapshot = name
	id := r.name()
	res, err = r.d.Deploy(t.Context(), env, deploy.Options{Provider: "docker", Name: id, Store: s.store})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, res, "POST", "/website/shop/orders", res.Token, url.Values{"product": {"3"}, "quantity": {"1"}}); code != http.StatusSeeOther {
		t.Errorf("POST an order on the restored tables: %d, want 303", code)
	}
	if _, page := get(t, res, "GET", "/website/shop/", res.Token, nil); !strings.Contains(page, "2 × Blue mug") || !strings.Contains(page, "1 × Desk lamp") {
		t.Errorf("the restored shop does not list both orders:\n%s", page)
	}
	assertReceiptClean(t, teardown(t, r, id), false)
	rc, err := r.d.RemoveSnapshot(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	assertReceiptClean(t, rc, false)
}

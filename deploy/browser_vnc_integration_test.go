//go:build integration

package deploy_test

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/gateway"
	"github.com/agentenv/agentenv/spec"
)

// browserImage is the browser's image for the tests: AGENTENV_TEST_BROWSER_IMAGE (a variant
// built with build.sh's TAG), or the env's default.
func browserImage() string {
	if img := os.Getenv("AGENTENV_TEST_BROWSER_IMAGE"); img != "" {
		return img
	}
	return spec.DefaultBrowserImage
}

// TestBrowserVNCShop deploys examples/shop/browser.yaml twice on docker, without and with
// browser.vnc (deploy-to-ready of each logged side by side). Without: headless, no Xvfb, and no
// /svc/browser-vnc/. With: a viewer's websocket to /svc/browser-vnc/websockify (noVNC's
// path) gets the RFB banner and, with no password asked, the screen's size; the gateway
// serves noVNC at /svc/browser-vnc/vnc.html to the admin token only (no token: 401; a role
// token: 403), and to a person's browser that traded the admin token once for the route's
// cookie (then no Authorization header, the websocket too); the agent's browser_navigate to
// the shop works, headed on that screen; over a minute after it connected (past the call
// timeout) the viewer clicks a button through VNC and the page the agent reads shows the
// order (a person can take over); teardown leaves nothing.
func TestBrowserVNCShop(t *testing.T) {
	r := newRig(t, nil)
	load := func(vnc bool) *spec.Env {
		env := r.browserEnv()
		env.Browser.Image = browserImage()
		env.Browser.VNC = vnc
		return env
	}
	var took [2]time.Duration

	// Without vnc: the same image, headless as before.
	start := time.Now()
	res, cs := r.deployAndConnect(load(false))
	took[0] = time.Since(start)
	if text, isErr := callText(t, cs, "browser_navigate", map[string]any{"url": "http://shop:8080/"}); isErr || !strings.Contains(text, "Page Title: Shop") {
		t.Errorf("without vnc: browser_navigate to the shop: %.500s", text)
	}
	if code, _ := get(t, res, "GET", "/svc/browser-vnc/vnc.html", res.Token, nil); code != http.StatusNotFound {
		t.Errorf("without vnc: /svc/browser-vnc/vnc.html answered %d, want 404", code)
	}
	if _, ok := res.Doc.URLs[spec.BrowserVNCService]; ok {
		t.Errorf("without vnc: the deployment's URLs have browser-vnc: %v", res.Doc.URLs)
	}
	if ps := r.exec(res, spec.BrowserName, "sh", "-c", `cat /proc/[0-9]*/cmdline | tr '\0' ' '`); strings.Contains(ps, "Xvfb") || !strings.Contains(ps, "--headless") {
		t.Errorf("without vnc: the browser's processes:\n%s", ps)
	}

	// With vnc.
	start = time.Now()
	res, cs = r.deployAndConnect(load(true))
	took[1] = time.Since(start)
	t.Logf("deploy-to-ready of the shop with a browser: without vnc %s, with vnc %s", took[0].Round(time.Millisecond), took[1].Round(time.Millisecond))

	// A viewer, from the start: the RFB handshake through the gateway's websocket.
	rfb := dialRFB(t, res, res.Token)
	opened := time.Now()
	defer rfb.Close()
	banner := rfb.read(12)
	if !strings.HasPrefix(string(banner), "RFB 003.") {
		t.Fatalf("websocket /svc/browser-vnc/websockify: banner %q, want RFB 003.xxx", banner)
	}
	t.Logf("RFB banner %q", strings.TrimSpace(string(banner)))
	rfb.write([]byte("RFB 003.008\n"))
	n := rfb.read(1)[0]
	types := rfb.read(int(n))
	if n == 0 || !strings.ContainsRune(string(types), 1) {
		t.Fatalf("security types %v: want None (1), no password", types)
	}
	rfb.write([]byte{1})
	if res := rfb.read(4); binary.BigEndian.Uint32(res) != 0 {
		t.Fatalf("security result %v, want OK", res)
	}
	rfb.write([]byte{1}) // ClientInit: shared
	si := rfb.read(24)
	w, h := binary.BigEndian.Uint16(si[0:2]), binary.BigEndian.Uint16(si[2:4])
	rfb.read(int(binary.BigEndian.Uint32(si[20:24]))) // the desktop's name
	if w != 1280 || h != 800 {
		t.Errorf("screen %dx%d, want 1280x800", w, h)
	}

	page := res.Doc.URLs[spec.BrowserVNCService]
	if gw := strings.TrimSuffix(res.GatewayURL, "/mcp"); page != gw+spec.BrowserVNCPage {
		t.Errorf("URLs[browser-vnc] = %q, want the noVNC page under %s", page, gw)
	}
	code, body := get(t, res, "GET", "/svc/browser-vnc/vnc.html", res.Token, nil)
	if code != http.StatusOK || !strings.Contains(body, "noVNC") {
		t.Errorf("/svc/browser-vnc/vnc.html with the admin token: %d %.300s", code, body)
	}
	if code, _ := get(t, res, "GET", "/svc/browser-vnc/vnc.html", "", nil); code != http.StatusUnauthorized {
		t.Errorf("/svc/browser-vnc/vnc.html without a token: %d, want 401", code)
	}
	for role, tok := range res.Tokens {
		if code, _ := get(t, res, "GET", "/svc/browser-vnc/vnc.html", tok, nil); code != http.StatusForbidden {
			t.Errorf("/svc/browser-vnc/vnc.html with role %s's token: %d, want 403", role, code)
		}
	}
	if len(res.Tokens) == 0 {
		t.Error("no role tokens to check the refusal with")
	}
	if ps := r.exec(res, spec.BrowserName, "sh", "-c", `cat /proc/[0-9]*/cmdline | tr '\0' ' '`); !strings.Contains(ps, "Xvfb :99 ") || !strings.Contains(ps, "x11vnc") ||
		strings.Contains(ps, "-viewonly") || strings.Contains(ps, "--headless") {
		t.Errorf("with vnc: the browser's processes:\n%s", ps)
	}

	// The agent drives the browser, headed on the display.
	if text, isErr := callText(t, cs, "browser_navigate", map[string]any{"url": "http://shop:8080/"}); isErr || !strings.Contains(text, "Page Title: Shop") {
		t.Errorf("with vnc: browser_navigate to the shop: %.500s", text)
	}

	// A person's browser: the admin token once in the query, traded for the route's cookie,
	// which then opens the page and noVNC's websocket (same-origin, no Authorization header).
	login := strings.TrimSuffix(res.GatewayURL, "/mcp") + spec.BrowserVNCPage + "&" + gateway.SvcTokenParam + "=" + res.Token
	noFollow := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	lresp, err := noFollow.Get(login)
	if err != nil {
		t.Fatal(err)
	}
	lresp.Body.Close()
	cookies := lresp.Cookies()
	if lresp.StatusCode != http.StatusSeeOther || lresp.Header.Get("Location") == "" || strings.Contains(lresp.Header.Get("Location"), res.Token) || len(cookies) != 1 {
		t.Fatalf("login with the admin token in the query: %s to %q, cookies %v", lresp.Status, lresp.Header.Get("Location"), cookies)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", strings.TrimSuffix(res.GatewayURL, "/mcp")+lresp.Header.Get("Location"), nil)
	req.AddCookie(cookies[0])
	if cresp, err := noFollow.Do(req); err != nil || cresp.StatusCode != http.StatusOK {
		t.Errorf("the noVNC page with the cookie: %v %v", cresp, err)
	} else {
		cresp.Body.Close()
	}
	byCookie := dialRFB(t, res, "", cookies[0])
	if banner := byCookie.read(12); !strings.HasPrefix(string(banner), "RFB 003.") {
		t.Errorf("websocket with the cookie: banner %q", banner)
	}
	byCookie.Close()

	// The viewer has watched past the gateway's call timeout and its server's write deadline
	// (60 s each), which bound ordinary answers but not its stream.
	if wait := 65*time.Second - time.Since(opened); wait > 0 {
		time.Sleep(wait)
	}
	// Take over: the viewer clicks "Order Blue mug" on the screen (where the page says the
	// button is), and the order appears on the page the agent reads.
	text, isErr := callText(t, cs, "browser_evaluate", map[string]any{"function": `() => {
		const b = [...document.querySelectorAll("button")].find(b => b.textContent.includes("Blue mug")).getBoundingClientRect();
		return Math.round(window.screenX + (window.outerWidth - window.innerWidth) / 2 + b.x + b.width / 2) + "," +
			Math.round(window.screenY + window.outerHeight - window.innerHeight + b.y + b.height / 2);
	}`})
	m := regexp.MustCompile(`(\d+),(\d+)`).FindStringSubmatch(text)
	if isErr || m == nil {
		t.Fatalf("browser_evaluate the button's place: %.500s", text)
	}
	x, _ := strconv.Atoi(m[1])
	y, _ := strconv.Atoi(m[2])
	t.Logf("clicking through VNC at %d,%d", x, y)
	pointer := func(mask byte) []byte {
		b := []byte{5, mask, 0, 0, 0, 0}
		binary.BigEndian.PutUint16(b[2:], uint16(x))
		binary.BigEndian.PutUint16(b[4:], uint16(y))
		return b
	}
	rfb.write(pointer(0))
	rfb.write(pointer(1)) // left button down
	rfb.write(pointer(0)) // and up
	deadline := time.Now().Add(60 * time.Second)
	for {
		snap, _ := callText(t, cs, "browser_snapshot", nil)
		if strings.Contains(snap, "1 × Blue mug") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the click through VNC placed no order within 60 s; the page:\n%.1500s", snap)
		}
		time.Sleep(time.Second)
	}
}

// exec runs argv in component name's container within 30 s and returns its output.
func (r *rig) exec(res *deploy.Result, name string, argv ...string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 30*time.Second)
	defer cancel()
	out, err := r.docker.Exec(ctx, r.record(res, name), argv)
	if err != nil || out.ExitCode != 0 {
		r.t.Fatalf("exec %q in %s: %v (exit %d) %s", argv, name, err, out.ExitCode, out.Stderr)
	}
	return string(out.Stdout)
}

// wsRFB is an RFB stream over a websocket's binary messages.
type wsRFB struct {
	t    *testing.T
	c    *websocket.Conn
	left []byte
}

// dialRFB opens noVNC's websocket through the gateway with token, bounded by 30 s a read.
// With cookies and no token it is a browser's: the gateway's own origin, the cookies sent.
func dialRFB(t *testing.T, res *deploy.Result, token string, cookies ...*http.Cookie) *wsRFB {
	t.Helper()
	base := strings.TrimSuffix(res.GatewayURL, "/mcp")
	u := "ws" + strings.TrimPrefix(base, "http") + "/svc/browser-vnc/websockify"
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second, Subprotocols: []string{"binary"}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	hdr := http.Header{}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	if len(cookies) > 0 {
		hdr.Set("Origin", base)
		var parts []string
		for _, c := range cookies {
			parts = append(parts, c.Name+"="+c.Value)
		}
		hdr.Set("Cookie", strings.Join(parts, "; "))
	}
	c, resp, err := d.DialContext(ctx, u, hdr)
	if err != nil {
		status := ""
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			status = resp.Status + " " + string(b)
		}
		t.Fatalf("websocket %s: %v %s", u, err, status)
	}
	return &wsRFB{t: t, c: c}
}

func (w *wsRFB) read(n int) []byte {
	w.t.Helper()
	for len(w.left) < n {
		_ = w.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, b, err := w.c.ReadMessage()
		if err != nil {
			w.t.Fatalf("rfb read: %v", err)
		}
		w.left = append(w.left, b...)
	}
	out := w.left[:n:n]
	w.left = w.left[n:]
	return out
}

func (w *wsRFB) write(b []byte) {
	w.t.Helper()
	_ = w.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if err := w.c.WriteMessage(websocket.BinaryMessage, b); err != nil {
		w.t.Fatalf("rfb write: %v", err)
	}
}

// Close closes the websocket.
func (w *wsRFB) Close() { _ = w.c.Close() }

// Package cloudapi is the client side of a cloud sandbox API (E2B, Tensorlake and Vercel over
// HTTP with JSON; Tenki over Connect; modal's and smol_vm's settings), the parts every such
// provider writes the same way:
//
//   - [Client]: one request with the API key (JSON in, JSON out, or a body streamed either way),
//     a non-2xx answer decoded into an [apierr.Error] (map it with [apierr.Kind]), and the
//     "no API key" error that makes a chain move on before anything is created.
//   - [Gate]: the rate limit and the cap on creates in flight, entered before each create;
//     [Creates]: the start of every create (ctx, the credential, the gate, and the create's own
//     detached context bounded by CreateTimeout).
//   - [Backstop]: the lifetime sent with a create so that a sandbox nobody tears down still ends.
//   - [Releaser]: the undo of a create that will not be used (a failed, cancelled or lost
//     create), on a detached bounded context, found again by its record label when its id is
//     unknown.
//   - [Pages]: a bounded walk over a paged listing.
//   - [Await]: the poll, bounded by the create's deadline, until a new sandbox runs.
//   - [CheckRecord], [RecordName]: the name every cloud sandbox (and container in a VM) has;
//     [Labels]: a spec's labels with its expiry, for the cloud's metadata; [JoinPorts] and
//     [Endpoints]: a sandbox's ports kept in a label, for a cloud that keeps none of its own.
//   - [Config]: the settings every cloud shares (credential hint, backstop, rate, creates in
//     flight, request bounds, HTTP client), embedded in each cloud provider's Config and filled
//     by [Config.Defaults]; [Default] is the one rule for a Config's numbers (zero means the
//     default, a negative number is ErrInvalid naming its field).
//   - [WriteEnvelope], [ReadEnvelope], [EndStream]: the Connect protocol's framing of a server
//     stream in JSON (E2B's envd speaks it); a Connect unary call is a plain [Client.JSON] POST
//     whose error body {"code", "message"} the default [Message] decodes.
//
// A new cloud provider embeds a Config in its own, and keeps one Client, one Creates, one
// Backstop and one Releaser in its Provider, made in New from its Config:
//
//	if err := cfg.Defaults(cloudapi.Config{Timeout: DefaultTimeout, ...}); err != nil {
//		return nil, fmt.Errorf("acme: %w", err)
//	}
//	p.api = &cloudapi.Client{Name: "acme", Key: cfg.APIKey, KeyHint: cfg.CredentialHint,
//		Auth: cloudapi.Bearer, HTTP: cfg.HTTPClient}
//	p.backstop = cloudapi.Backstop{Default: cfg.Timeout, Margin: cfg.Margin, Max: cfg.MaxTimeout}
//	p.rel = cloudapi.Releaser{Provider: p, Log: p.log, Timeout: cfg.RequestTimeout}
//	p.creates = cloudapi.Creates{Prefix: "acme", Gate: cloudapi.NewGate(cfg.Rate, cfg.Concurrency),
//		Check: p.api.CheckKey, Timeout: cfg.CreateTimeout}
//
// Its Create then checks the spec ([CheckRecord]), calls creates.Begin, sends the backstop's
// seconds with the labels ([Labels]) in the create request on Begin's context, and on an answer
// that may have been lost calls rel.Record (on one it will not use, rel.Release); it waits with
// [Await] until the sandbox runs; its List walks Pages and filters with [agentenv.MatchLabels];
// its Terminate treats [apierr.Status] 404 as gone. A VM-mode provider embeds
// internal/vmdocker's VMs for RunInVM, RemoveFromVM and ExecInVM.
// What differs between clouds (paths, bodies, how labels are stored) stays in the provider.
package cloudapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
)

// MaxAnswer bounds a JSON answer read into memory by [Client.JSON].
const MaxAnswer = 16 << 20

// maxErrorBody bounds the part of a non-2xx answer read for its message.
const maxErrorBody = 4 << 10

// Client sends requests to one cloud API with its key. Its fields are set once, before use; it
// is then safe for concurrent use.
type Client struct {
	Name    string // the provider's name, which prefixes the missing-key error
	Key     string // the API key; never logged, sent only by Auth
	KeyHint string // what to set when Key is empty, for the error
	// Auth puts key on a request's headers (see [Bearer], [Header]). Nil for an API with no
	// authentication (smolvm's local server): no key is then needed or sent.
	Auth func(h http.Header, key string)
	// Message makes the message of a non-2xx answer from (the start of) its body; default
	// [Message].
	Message func(body []byte) string
	HTTP    *http.Client // default http.DefaultClient; requests are bounded by their context
}

// Bearer sends the key as "Authorization: Bearer KEY".
func Bearer(h http.Header, key string) { h.Set("Authorization", "Bearer "+key) }

// Header returns an Auth that sends the key in header name (E2B's X-API-Key).
func Header(name string) func(http.Header, string) {
	return func(h http.Header, key string) { h.Set(name, key) }
}

// CheckKey fails when no API key is configured: a configuration error (ErrInvalid: nothing is
// made) that also makes the provider unavailable, so that a chain moves on.
func (c *Client) CheckKey() error {
	if c.Key == "" {
		return fmt.Errorf("%s: no API key: %s: %w: %w", c.Name, c.KeyHint, agentenv.ErrInvalid, agentenv.ErrUnavailable)
	}
	return nil
}

// Do sends one request to rawURL with the key (unless Auth is nil), Accept: application/json and, when contentType
// is not empty, that Content-Type, and returns a 2xx answer with its body open (the caller
// closes it). A non-2xx answer is an *[apierr.Error] carrying its status and message; a
// transport error is returned as it is (map both with [apierr.Kind]).
func (c *Client) Do(ctx context.Context, method, rawURL string, body io.Reader, contentType string) (*http.Response, error) {
	if c.Auth != nil {
		if err := c.CheckKey(); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if c.Auth != nil {
		c.Auth(req.Header, c.Key)
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	msg := c.Message
	if msg == nil {
		msg = Message
	}
	return nil, &apierr.Error{Status: resp.StatusCode, Message: msg(b)}
}

// JSON sends in (if not nil) as a JSON body and decodes a 2xx JSON answer into out (if not nil
// and the answer not empty), as [Client.Do]. It returns a 2xx answer's headers (paging tokens).
func (c *Client) JSON(ctx context.Context, method, rawURL string, in, out any) (http.Header, error) {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	resp, err := c.Do(ctx, method, rawURL, body, ct)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	where := method + " " + pathOf(rawURL)
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer))
	if err != nil {
		return nil, fmt.Errorf("%s: read answer: %w", where, err)
	}
	if out != nil && len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("%s: decode answer: %w", where, err)
		}
	}
	return resp.Header, nil
}

// pathOf is rawURL's path, which names the call in an error without its query.
func pathOf(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Path
	}
	return rawURL
}

// Message is the message of an error answer: its JSON "message" (E2B, Connect), else its JSON
// "error" with a string "code" after it in parentheses (Tensorlake's sandbox API), else the
// first 300 bytes of the body as text (Tensorlake's management API answers plain text).
func Message(body []byte) string {
	var e struct {
		Message string          `json:"message"`
		Error   string          `json:"error"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(body, &e) == nil {
		switch {
		case e.Message != "":
			return e.Message
		case e.Error != "":
			var code string
			if json.Unmarshal(e.Code, &code) == nil && code != "" {
				return e.Error + " (" + code + ")"
			}
			return e.Error
		}
	}
	return strings.TrimSpace(string(body[:min(len(body), 300)]))
}

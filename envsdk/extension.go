package envsdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/internal/httpserve"
)

// ExtensionPath is where a server's extension routes live: ExtensionPath + the method name,
// the anchor's /agentenv/ext/<method>. Behind a gateway they are reached at
// /svc/<server>/agentenv/ext/<method>.
const ExtensionPath = "/agentenv/ext/"

// maxExtensionBody bounds the body of one extension request.
const maxExtensionBody = 4 << 20

// Extension is one REST route a Go env serves beside its tools (the anchor's @extension), for
// the harness rather than the agent: configuration, fault injection, clock sync. It is
// advertised on the card under capabilities.extensions as the anchor shapes it, {uri,
// description, required: false, params: {endpoint, methods: {name: {method, endpoint,
// request}}}}, so a caller finds and invokes it from the card alone.
type Extension struct {
	URI         string         // stable discovery key, e.g. urn:example:config/v1
	Name        string         // the method name; the route is ExtensionPath + Name
	Description string         // what it does
	HTTPMethod  string         // POST (default) or GET; a GET reads its arguments from the query
	Request     map[string]any // JSON Schema of the request body (or query), advertised
	// Handle answers one request: body is the JSON body of a POST (or the query of a GET as
	// a JSON object of strings). Its result is written as JSON; an error is a 400 with
	// {"error": message}.
	Handle func(ctx context.Context, body json.RawMessage) (any, error)
}

// WithExtensions returns s's handler with exts served under ExtensionPath and advertised on
// the card. Extensions sharing a URI are advertised as one extension with several methods.
func WithExtensions(s *Server, exts ...Extension) (http.Handler, error) {
	base := s.Handler()
	byName := make(map[string]Extension, len(exts))
	for i, e := range exts {
		if e.URI == "" || e.Name == "" || e.Handle == nil {
			return nil, fmt.Errorf("envsdk: extension %d: want a URI, a name and a handler", i)
		}
		if strings.ContainsAny(e.Name, "/?#") {
			return nil, fmt.Errorf("envsdk: extension %s: name %q has a path character", e.URI, e.Name)
		}
		if _, dup := byName[e.Name]; dup {
			return nil, fmt.Errorf("envsdk: extension method %q declared twice", e.Name)
		}
		switch e.HTTPMethod {
		case "":
			e.HTTPMethod = http.MethodPost
		case http.MethodPost, http.MethodGet:
		default:
			return nil, fmt.Errorf("envsdk: extension %s: method %s, want POST or GET", e.Name, e.HTTPMethod)
		}
		byName[e.Name] = e
		exts[i] = e
	}
	advert := advertise(exts)
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+envproto.CardPath, func(w http.ResponseWriter, r *http.Request) {
		card, err := cardWithExtensions(s.Card(), advert)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(card, '\n'))
	})
	mux.HandleFunc(ExtensionPath+"{name}", func(w http.ResponseWriter, r *http.Request) {
		e, ok := byName[r.PathValue("name")]
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no extension method " + r.PathValue("name")})
			return
		}
		if r.Method != e.HTTPMethod {
			w.Header().Set("Allow", e.HTTPMethod)
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use " + e.HTTPMethod})
			return
		}
		body, err := extensionBody(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		res, err := e.Handle(r.Context(), body)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.Handle("/", base)
	return mux, nil
}

// ServeWithExtensions is [Server.Serve] with exts added as [WithExtensions] adds them.
func (s *Server) ServeWithExtensions(ctx context.Context, addr string, exts ...Extension) error {
	h, err := WithExtensions(s, exts...)
	if err != nil {
		return err
	}
	ln, err := httpserve.Listen(ctx, addr, 0)
	if err != nil {
		return fmt.Errorf("envsdk: %w", err)
	}
	return ServeHandler(ctx, ln, h, s.mcp, s.log)
}

// extensionBody reads a POST's JSON body (empty means {}) or a GET's query as a JSON object.
func extensionBody(r *http.Request) (json.RawMessage, error) {
	if r.Method == http.MethodGet {
		q := map[string]string{}
		for k, v := range r.URL.Query() {
			q[k] = v[0]
		}
		return json.Marshal(q)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxExtensionBody+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if len(b) > maxExtensionBody {
		return nil, fmt.Errorf("body larger than %d bytes", maxExtensionBody)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(b) {
		return nil, errors.New("body is not JSON")
	}
	return b, nil
}

// extensionAdvert is one extension as the card lists it.
type extensionAdvert struct {
	URI         string         `json:"uri"`
	Description string         `json:"description,omitempty"`
	Required    bool           `json:"required"`
	Params      map[string]any `json:"params"`
}

// advertise groups exts by URI into the card's extension entries, in declaration order.
func advertise(exts []Extension) []extensionAdvert {
	var out []extensionAdvert
	at := map[string]int{}
	for _, e := range exts {
		i, ok := at[e.URI]
		if !ok {
			i = len(out)
			at[e.URI] = i
			out = append(out, extensionAdvert{URI: e.URI, Description: e.Description, Params: map[string]any{
				"endpoint": ExtensionPath + url.PathEscape(e.Name), "methods": map[string]any{},
			}})
		}
		m := map[string]any{"method": e.HTTPMethod, "endpoint": ExtensionPath + url.PathEscape(e.Name)}
		if e.Request != nil {
			m["request"] = e.Request
		}
		out[i].Params["methods"].(map[string]any)[e.Name] = m
	}
	return out
}

// cardWithExtensions adds advert to the card's capabilities.extensions, keeping every other
// field of the card as the server encodes it.
func cardWithExtensions(card envproto.Card, advert []extensionAdvert) ([]byte, error) {
	raw, err := json.Marshal(card)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	caps, _ := m["capabilities"].(map[string]any)
	if caps == nil {
		caps = map[string]any{}
	}
	list, _ := caps["extensions"].([]any)
	for _, a := range advert {
		list = append(list, a)
	}
	caps["extensions"] = list
	m["capabilities"] = caps
	return json.Marshal(m)
}

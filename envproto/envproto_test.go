package envproto_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentenv/agentenv/envproto"
)

func readCard(t *testing.T, name string) envproto.Card {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var c envproto.Card
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

// view is what a reader of a card relies on.
type view struct {
	Name, Version, URL, MCP string
	Methods                 []string
	Tools                   []string
	Extensions              []string
	Children                []string
	Deprecated              []string
}

func viewOf(c envproto.Card) view {
	v := view{Name: c.Name, Version: c.ProtocolVersion, URL: c.URL, MCP: c.MCPURL(), Methods: c.Methods(), Deprecated: c.Deprecated}
	for _, t := range c.Capabilities.Tools {
		var schema bytes.Buffer
		_ = json.Compact(&schema, t.InputSchema)
		v.Tools = append(v.Tools, t.Name+" "+schema.String())
	}
	for _, e := range c.Capabilities.Extensions {
		v.Extensions = append(v.Extensions, e.URI)
	}
	for _, ch := range c.Children {
		v.Children = append(v.Children, ch.Name+" "+ch.URL+" "+strings.Join(ch.Methods(), ","))
	}
	return v
}

func TestCardDecode(t *testing.T) {
	all := []string{envproto.MethodReset, envproto.MethodAdd, envproto.MethodGet}
	for _, tt := range []struct {
		file string
		want view
	}{
		{"anchor-card.json", view{
			Name: "portsim", Version: "1.0", URL: "/agentenv", MCP: "/mcp", Methods: all,
			Tools: []string{
				`move_ship {"type":"object","properties":{"ship":{"type":"string"},"berth":{"type":"integer"}},"required":["ship","berth"]}`,
				`list_ships {"type":"object","properties":{}}`,
			},
			Extensions: []string{envproto.IntakeExtension, "urn:portsim:clock/v1"},
		}},
		// The anchor's model fills url and protocolVersion with defaults; absent operations is a
		// card from before they were advertised: all three.
		{"anchor-card-minimal.json", view{Name: "bare", URL: "/agentenv", MCP: "/mcp", Methods: all}},
		{"anchor-card-no-data.json", view{Name: "tools-only", Version: "1.0", URL: "/agentenv", MCP: "/api/mcp", Methods: []string{}}},
		{"anchor-card-composed.json", view{Name: "harbor", Version: "1.0", URL: "/agentenv", MCP: "/mcp", Methods: all,
			Children: []string{"portsim /svc/mcp-portsim/agentenv data/get"}}},
		{"legacy-card.json", view{Name: "notes", Version: envproto.LegacyVersion, URL: "/agentenv", MCP: "/mcp",
			Methods: []string{envproto.MethodReset, envproto.MethodAdd}, Tools: []string{`add_note {"type":"object"}`},
			Extensions: []string{"urn:x:y"}, Deprecated: []string{"protocol_version", "tools", "endpoints", "extensions"}}},
		{"legacy-card-no-data.json", view{Name: "db", Version: envproto.LegacyVersion, MCP: "/mcp", Methods: []string{},
			Tools: nil, Deprecated: []string{"protocol_version", "tools", "endpoints"}}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			c := readCard(t, tt.file)
			if diff := cmp.Diff(tt.want, viewOf(c)); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
			// Encoding writes the anchor's names only, and reads back the same.
			raw, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, old := range []string{`"protocol_version"`, `"input_schema"`, `"endpoints"`, `"servers"`, `"mime_type"`} {
				if strings.Contains(string(raw), old) {
					t.Errorf("encoded card has deprecated %s: %s", old, raw)
				}
			}
			var back envproto.Card
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			want := viewOf(c)
			want.Deprecated = nil
			if diff := cmp.Diff(want, viewOf(back)); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCardExtension(t *testing.T) {
	c := readCard(t, "anchor-card.json")
	ext := c.Extension("urn:portsim:clock/v1")
	if ext == nil {
		t.Fatal("clock extension not found")
	}
	var p struct {
		Endpoint string `json:"endpoint"`
		Methods  map[string]struct {
			Method string `json:"method"`
		} `json:"methods"`
	}
	if err := json.Unmarshal(ext.Params, &p); err != nil || p.Endpoint != "/agentenv/ext/sync_env_clock" || p.Methods["sync_env_clock"].Method != "POST" {
		t.Errorf("params %s: %+v %v", ext.Params, p, err)
	}
	if c.Extension("urn:none") != nil || c.Child("none") != nil {
		t.Error("found what is not there")
	}
}

func TestPartsDecode(t *testing.T) {
	raw, err := os.ReadFile("testdata/anchor-parts.json")
	if err != nil {
		t.Fatal(err)
	}
	var p envproto.AddParams
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	type pv struct{ Kind, Text, Name, Mime, Bytes, URI, Scheme, Data, Meta string }
	var got []pv
	for _, part := range p.Parts {
		v := pv{Kind: part.Kind, Text: part.Text, Data: string(part.Data), Meta: string(part.Metadata)}
		if part.File != nil {
			v.Name, v.Mime, v.Bytes, v.URI, v.Scheme = part.File.Name, part.File.MimeType, string(part.File.Bytes), part.File.URI, part.File.URIScheme()
		}
		if v.Meta == "null" {
			v.Meta = ""
		}
		got = append(got, v)
	}
	want := []pv{
		{Kind: "text", Text: "hello"},
		{Kind: "file", Name: "hello.txt", Mime: "text/plain", Bytes: "hello world"},
		{Kind: "file", Mime: "application/zip", URI: "file:///data/seed.zip", Scheme: "file"},
		{Kind: "file", Name: "seed.json", Mime: "application/json", URI: "https://bucket.example/seed.json?X-Amz-Signature=abc", Scheme: "https",
			Meta: `{"urn:agentenv:data-objects/v1": {"path": "exports/seed.json"}}`},
		{Kind: "data", Data: `{"ships": [{"id": "s1", "berth": 3}]}`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
}

func TestPartsEncode(t *testing.T) {
	for _, tt := range []struct {
		name string
		part envproto.Part
		want string
	}{
		{"text", envproto.Part{Kind: "text", Text: "hi"}, `{"kind":"text","text":"hi"}`},
		{"inline file", envproto.Part{Kind: "file", File: &envproto.FilePart{Name: "a.txt", MimeType: "text/plain", Bytes: []byte("hi")}},
			`{"kind":"file","file":{"bytes":"aGk=","mimeType":"text/plain","name":"a.txt"}}`},
		{"empty inline file", envproto.Part{Kind: "file", File: &envproto.FilePart{Name: "empty"}}, `{"kind":"file","file":{"bytes":"","name":"empty"}}`},
		{"file uri", envproto.Part{Kind: "file", File: &envproto.FilePart{URI: "file:///x.zip", MimeType: "application/zip"}},
			`{"kind":"file","file":{"uri":"file:///x.zip","mimeType":"application/zip"}}`},
		{"data", envproto.Part{Kind: "data", Data: json.RawMessage(`{"a":1}`)}, `{"kind":"data","data":{"a":1}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := json.Marshal(tt.part)
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != tt.want {
				t.Errorf("got  %s\nwant %s", raw, tt.want)
			}
		})
	}
}

func TestLegacyParts(t *testing.T) {
	raw, err := os.ReadFile("testdata/legacy-parts.json")
	if err != nil {
		t.Fatal(err)
	}
	var p envproto.AddParams
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	f := p.Parts[0].File
	if f.MimeType != "text/csv" || string(f.Bytes) != "a,b" || f.Name != "a.csv" {
		t.Errorf("legacy file = %+v", f)
	}
	out, _ := json.Marshal(p)
	if !strings.Contains(string(out), `"mimeType":"text/csv"`) || strings.Contains(string(out), "mime_type") {
		t.Errorf("re-encoded %s, want mimeType only", out)
	}
}

func TestMethodsWithoutURL(t *testing.T) {
	c := envproto.Card{Name: "x", Capabilities: envproto.Capabilities{Operations: []string{envproto.MethodGet}}}
	if c.HasDataPlane() || !slices.Equal(c.Methods(), []string{}) {
		t.Errorf("a card without url has methods %v", c.Methods())
	}
}

package gateway

import (
	"encoding/json"
	"testing"

	"github.com/agentenv/agentenv/envproto"
)

func TestRebaseExtensions(t *testing.T) {
	in := []envproto.Extension{
		{URI: "urn:x", Params: json.RawMessage(`{"endpoint":"/agentenv/ext/","methods":{"set":{"method":"POST","endpoint":"/agentenv/ext/set"},"far":{"method":"GET","endpoint":"https://elsewhere/x"}}}`)},
		{URI: "urn:y", Params: json.RawMessage(`"not an object"`)},
		{URI: "urn:z"},
	}
	out := rebaseExtensions(in, "/svc/kv")
	var got struct {
		Endpoint string `json:"endpoint"`
		Methods  map[string]struct {
			Endpoint string `json:"endpoint"`
		} `json:"methods"`
	}
	if err := json.Unmarshal(out[0].Params, &got); err != nil {
		t.Fatal(err)
	}
	if got.Endpoint != "/svc/kv/agentenv/ext/" || got.Methods["set"].Endpoint != "/svc/kv/agentenv/ext/set" || got.Methods["far"].Endpoint != "https://elsewhere/x" {
		t.Errorf("rebased params = %s", out[0].Params)
	}
	if string(out[1].Params) != `"not an object"` || out[2].Params != nil {
		t.Errorf("kept params = %s, %s", out[1].Params, out[2].Params)
	}
	if string(in[0].Params) == string(out[0].Params) {
		t.Error("input changed in place or not rebased")
	}
}

package gateway_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/gateway"
)

// TestAnchorCard checks that the gateway finds a server's data plane through its card's url
// (here /rpc, not /agentenv) and advertises that server's operations as its own.
func TestAnchorCard(t *testing.T) {
	b := startBackend(t, "portsim", backendOpts{anchor: true}, "move")
	_, gw := newGateway(t, gateway.Config{}, b)

	code, body, _ := do(t, "GET", gw.URL+envproto.CardPath, testToken, nil, nil)
	var card envproto.Card
	if code != 200 || json.Unmarshal(body, &card) != nil {
		t.Fatalf("card: %d %s", code, body)
	}
	if want := []string{envproto.MethodReset, envproto.MethodGet}; !slices.Equal(card.Capabilities.Operations, want) {
		t.Errorf("operations = %v, want %v", card.Capabilities.Operations, want)
	}
	child := card.Child("portsim")
	if child == nil || child.URL != "/servers/portsim/agentenv" || !slices.Equal(child.Capabilities.Operations, []string{envproto.MethodReset, envproto.MethodGet}) {
		t.Fatalf("child = %+v", child)
	}
	if len(child.Capabilities.Tools) != 1 || child.Capabilities.Tools[0].Name != "move" || string(child.Capabilities.Tools[0].InputSchema) != `{"type":"object"}` {
		t.Errorf("child tools = %+v", child.Capabilities.Tools)
	}
	for _, path := range []string{envproto.DataPath, child.URL} {
		code, body, _ = do(t, "POST", gw.URL+path, testToken, envproto.Request{JSONRPC: "2.0", ID: json.RawMessage("7"), Method: envproto.MethodGet}, nil)
		if code != 200 || !strings.Contains(string(body), `"server":"portsim"`) || !strings.Contains(string(body), `"id":7`) {
			t.Errorf("POST %s: %d %s, want the answer of portsim's /rpc", path, code, body)
		}
	}
}

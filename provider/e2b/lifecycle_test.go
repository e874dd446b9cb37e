package e2b_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle/lifecycletest"
	"github.com/agentenv/agentenv/provider/e2b"
	"github.com/agentenv/agentenv/provider/e2b/e2bemu"
)

// TestLifecycle runs the lifecycle cases every cloud provider runs, on the E2B emulator.
func TestLifecycle(t *testing.T) {
	lifecycletest.Run(t, lifecycletest.Kit[*e2bemu.Server]{
		Name:     "e2b",
		Emulator: emulator,
		Provider: func(t *testing.T, emu *e2bemu.Server, name string) agentenv.Provider {
			return newProvider(t, emu, e2b.Config{Name: name}, nil)
		},
		CreateLost: createLost,
		Command:    serve,
	})
}

// createLost posts a create as the provider would (the labels in the metadata), whose answer the
// emulator drops.
func createLost(t *testing.T, emu *e2bemu.Server, record string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"templateID": "base", "timeout": 3600, "metadata": map[string]string{
		agentenv.LabelRecord: record, agentenv.LabelExpires: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL()+"/sandboxes", bytes.NewReader(body))
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	emu.SetCreateFault(&e2bemu.CreateFault{Lost: true, Times: 1})
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("create answered %s, want the answer lost", resp.Status)
	}
}

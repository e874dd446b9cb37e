package vercel_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle/lifecycletest"
	"github.com/agentenv/agentenv/provider/vercel"
	"github.com/agentenv/agentenv/provider/vercel/vercelemu"
)

// TestLifecycle runs the lifecycle cases every cloud provider runs, on the Vercel emulator.
func TestLifecycle(t *testing.T) {
	lifecycletest.Run(t, lifecycletest.Kit[*vercelemu.Server]{
		Name:     "vercel",
		Emulator: emulator,
		Provider: func(t *testing.T, emu *vercelemu.Server, name string) agentenv.Provider {
			return newProvider(t, emu, vercel.Config{Name: name}, nil)
		},
		CreateLost: createLost,
		Command:    serve,
	})
}

// createLost posts a create as the provider would (the record is the sandbox's name, the rest
// of its labels in its tags), whose answer the emulator drops.
func createLost(t *testing.T, emu *vercelemu.Server, record string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"projectId": project, "name": record, "timeout": 3600000, "persistent": false,
		"resources": map[string]any{"vcpus": 1}, "ports": []int{8080},
		"tags": map[string]string{"agentenv.labels": "", "agentenv.expires": "2099-01-01T00:00:00Z"}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL()+"/v3/sandboxes?teamId="+team, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	emu.SetCreateFault(&vercelemu.CreateFault{Lost: true, Times: 1})
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("create answered %s, want the answer lost", resp.Status)
	}
}

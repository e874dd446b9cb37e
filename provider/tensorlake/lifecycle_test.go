package tensorlake_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle/lifecycletest"
	"github.com/agentenv/agentenv/provider/tensorlake"
	"github.com/agentenv/agentenv/provider/tensorlake/tensorlakeemu"
)

// TestLifecycle runs the lifecycle cases every cloud provider runs, on the Tensorlake emulator.
func TestLifecycle(t *testing.T) {
	lifecycletest.Run(t, lifecycletest.Kit[*tensorlakeemu.Server]{
		Name:     "tensorlake",
		Emulator: emulator,
		Provider: func(t *testing.T, emu *tensorlakeemu.Server, name string) agentenv.Provider {
			return newProvider(t, emu, tensorlake.Config{Name: name}, nil)
		},
		CreateLost: createLost,
		Command:    serve,
	})
}

// createLost posts a create as the provider would (the labels ride in the entrypoint).
func createLost(t *testing.T, emu *tensorlakeemu.Server, record string) {
	t.Helper()
	labels, _ := json.Marshal(map[string]string{agentenv.LabelRecord: record,
		agentenv.LabelExpires: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	body, _ := json.Marshal(map[string]any{"name": record, "timeout_secs": 3600,
		"resources":  map[string]any{"cpus": 1, "memory_mb": 1024},
		"entrypoint": []string{"/bin/sh", "-c", `exec "$@"`, "agentenv.labels=" + string(labels), "sleep", "infinity"}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL()+"/sandboxes", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	emu.SetCreateFault(&tensorlakeemu.CreateFault{Lost: true, Times: 1})
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("create answered %s, want the answer lost", resp.Status)
	}
}

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
	lifecycletest.Run(t, lifecycletest.Kit{
		Name:     "tensorlake",
		Emulator: func(t *testing.T) lifecycletest.Emulator { return kitEmulator{emulator(t)} },
		Provider: func(t *testing.T, emu lifecycletest.Emulator, name string) agentenv.Provider {
			return newProvider(t, emu.(kitEmulator).Server, tensorlake.Config{Name: name}, nil)
		},
		Command: serve,
	})
}

// kitEmulator is the Tensorlake emulator as the lifecycle kit drives it.
type kitEmulator struct{ *tensorlakeemu.Server }

func (e kitEmulator) Made() int { return len(e.Server.Made()) }

func (e kitEmulator) Kills() int { return e.Calls("delete") }

// CreateLost posts a create as the provider would (the labels ride in the entrypoint).
func (e kitEmulator) CreateLost(t *testing.T, record string) {
	t.Helper()
	labels, _ := json.Marshal(map[string]string{agentenv.LabelRecord: record,
		agentenv.LabelExpires: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	body, _ := json.Marshal(map[string]any{"name": record, "timeout_secs": 3600,
		"resources":  map[string]any{"cpus": 1, "memory_mb": 1024},
		"entrypoint": []string{"/bin/sh", "-c", `exec "$@"`, "agentenv.labels=" + string(labels), "sleep", "infinity"}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL()+"/sandboxes", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	e.SetCreateFault(&tensorlakeemu.CreateFault{Lost: true, Times: 1})
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("create answered %s, want the answer lost", resp.Status)
	}
}

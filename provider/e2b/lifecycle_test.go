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
	lifecycletest.Run(t, lifecycletest.Kit{
		Name:     "e2b",
		Emulator: func(t *testing.T) lifecycletest.Emulator { return kitEmulator{emulator(t)} },
		Provider: func(t *testing.T, emu lifecycletest.Emulator, name string) agentenv.Provider {
			return newProvider(t, emu.(kitEmulator).Server, e2b.Config{Name: name}, nil)
		},
		Command: serve,
	})
}

// kitEmulator is the E2B emulator as the lifecycle kit drives it.
type kitEmulator struct{ *e2bemu.Server }

// Made counts the sandboxes started: E2B starts the command as a process in each.
func (e kitEmulator) Made() int { return e.Calls("process") }

func (e kitEmulator) Kills() int { return e.Calls("kill") }

func (e kitEmulator) CreateLost(t *testing.T, record string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"templateID": "base", "timeout": 3600, "metadata": map[string]string{
		agentenv.LabelRecord: record, agentenv.LabelExpires: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL()+"/sandboxes", bytes.NewReader(body))
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	e.SetCreateFault(&e2bemu.CreateFault{Lost: true, Times: 1})
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("create answered %s, want the answer lost", resp.Status)
	}
}

package smolvm_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle/lifecycletest"
	"github.com/agentenv/agentenv/provider/smolvm"
	"github.com/agentenv/agentenv/provider/smolvm/smolvmemu"
)

// TestLifecycle runs the lifecycle cases every cloud provider runs, on the smolvm emulator.
func TestLifecycle(t *testing.T) {
	lifecycletest.Run(t, lifecycletest.Kit{
		Name:     "smol_vm",
		Emulator: func(t *testing.T) lifecycletest.Emulator { return kitEmulator{emulator(t)} },
		Provider: func(t *testing.T, emu lifecycletest.Emulator, name string) agentenv.Provider {
			return newProvider(t, emu.(kitEmulator).Server, smolvm.Config{Name: name, Image: "python:3.12-alpine"}, nil)
		},
		Command: serve,
	})
}

// kitEmulator is the smolvm emulator as the lifecycle kit drives it.
type kitEmulator struct{ *smolvmemu.Server }

func (e kitEmulator) Made() int { return len(e.Server.Made()) }

func (e kitEmulator) Kills() int { return e.Calls("delete") }

// CreateLost posts a create as the provider would, whose answer is lost: the machine exists,
// made but never started, with no labels file (they are written after the start).
func (e kitEmulator) CreateLost(t *testing.T, record string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"name": record, "image": "python:3.12-alpine", "cmd": serve, "network": true,
		"entrypoint": []string{"/bin/sh", "-c", `"$@"`, "agentenv"}, "restart": map[string]any{"policy": "never"}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL()+"/api/v1/machines", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	e.SetCreateFault(&smolvmemu.CreateFault{Lost: true, Times: 1})
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("create answered %s, want the answer lost", resp.Status)
	}
}

package tenki_test

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle/lifecycletest"
	"github.com/agentenv/agentenv/provider/tenki"
	"github.com/agentenv/agentenv/provider/tenki/internal/wire"
	"github.com/agentenv/agentenv/provider/tenki/tenkiemu"
)

// TestLifecycle runs the lifecycle cases every cloud provider runs, on the Tenki emulator.
func TestLifecycle(t *testing.T) {
	lifecycletest.Run(t, lifecycletest.Kit{
		Name:     "tenki",
		Emulator: func(t *testing.T) lifecycletest.Emulator { return kitEmulator{emulator(t)} },
		Provider: func(t *testing.T, emu lifecycletest.Emulator, name string) agentenv.Provider {
			return newProvider(t, emu.(kitEmulator).Server, tenki.Config{Name: name}, nil)
		},
		Command: serve,
	})
}

// kitEmulator is the Tenki emulator as the lifecycle kit drives it.
type kitEmulator struct{ *tenkiemu.Server }

func (e kitEmulator) Made() int { return len(e.Server.Made()) }

func (e kitEmulator) Kills() int { return e.Calls("TerminateSession") }

// CreateLost calls CreateSession as the provider would (the labels in the metadata, the
// agentenv tag), and the emulator drops the answer.
func (e kitEmulator) CreateLost(t *testing.T, record string) {
	t.Helper()
	c := connect.NewClient[wire.CreateSessionRequest, wire.CreateSessionResponse](http.DefaultClient, e.URL()+wire.CreateSession, connect.WithCodec(wire.Codec{}))
	hour := wire.Duration(time.Hour)
	req := connect.NewRequest(&wire.CreateSessionRequest{Name: record, Tags: []string{tenki.Tag}, MaxDuration: &hour,
		Metadata: map[string]string{agentenv.LabelRecord: record, agentenv.LabelExpires: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}})
	wire.SetAuth(req.Header(), apiKey, "test")
	e.SetCreateFault(&tenkiemu.CreateFault{Lost: true, Times: 1})
	if _, err := c.CallUnary(t.Context(), req); err == nil {
		t.Fatal("create answered, want the answer lost")
	}
}

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
	lifecycletest.Run(t, lifecycletest.Kit[*tenkiemu.Server]{
		Name:     "tenki",
		Emulator: emulator,
		Provider: func(t *testing.T, emu *tenkiemu.Server, name string) agentenv.Provider {
			return newProvider(t, emu, tenki.Config{Name: name}, nil)
		},
		CreateLost: createLost,
		Command:    serve,
	})
}

// createLost calls CreateSession as the provider would (the labels in the metadata, the
// agentenv tag), and the emulator drops the answer.
func createLost(t *testing.T, emu *tenkiemu.Server, record string) {
	t.Helper()
	c := connect.NewClient[wire.CreateSessionRequest, wire.CreateSessionResponse](http.DefaultClient, emu.URL()+wire.CreateSession, connect.WithCodec(wire.Codec{}))
	hour := wire.Duration(time.Hour)
	req := connect.NewRequest(&wire.CreateSessionRequest{Name: record, Tags: []string{tenki.Tag}, MaxDuration: &hour,
		Metadata: map[string]string{agentenv.LabelRecord: record, agentenv.LabelExpires: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}})
	wire.SetAuth(req.Header(), apiKey, "test")
	emu.SetCreateFault(&tenkiemu.CreateFault{Lost: true, Times: 1})
	if _, err := c.CallUnary(t.Context(), req); err == nil {
		t.Fatal("create answered, want the answer lost")
	}
}

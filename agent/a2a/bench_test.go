package a2a

import (
	"context"
	"testing"
)

// BenchmarkPromptRoundTrip is an A2A prompt's overhead over HTTP on loopback, with an agent
// that answers at once: card, mcp-config, agent-config, message/send, trajectory read.
func BenchmarkPromptRoundTrip(b *testing.B) {
	srv, err := NewServer(&echoAgent{}, ServerOptions{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	f := &front{srv: srv}
	ts := newBenchServer(b, f)
	c := New(ts, Options{})
	p := testPrompt()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Prompt(context.Background(), p, nil); err != nil {
			b.Fatal(err)
		}
	}
}

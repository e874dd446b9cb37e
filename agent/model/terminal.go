package model

import (
	"context"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/termtools"
)

// addTerminal offers the terminal tools (termtools) over t, after any gateway tools, whose
// names win a clash.
func (ts *tools) addTerminal(t agent.Terminal) {
	for _, tt := range termtools.Tools() {
		call := tt.Call
		ts.add(tool{name: tt.Name, description: tt.Description, schema: tt.Schema,
			call: func(ctx context.Context, args map[string]any) (output, error) {
				text, isError, err := call(ctx, t, args)
				return output{text: text, isError: isError}, err
			}})
	}
}

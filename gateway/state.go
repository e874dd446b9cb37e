package gateway

import (
	"net/http"

	"github.com/agentenv/agentenv/envproto"
)

// State is the answer of GET /state.
type State struct {
	Name         string            `json:"name"`
	Mode         string            `json:"mode"`
	Serialize    string            `json:"serialize"` // the scope of consistent mode
	ToolNames    string            `json:"tool_names"`
	Servers      []ServerState     `json:"servers"`
	Websites     []WebsiteState    `json:"websites"`
	Tools        []envproto.Tool   `json:"tools"`
	Roles        map[string][]Rule `json:"roles"`
	Calls        int64             `json:"calls"`         // tool calls recorded so far
	CallsDropped int64             `json:"calls_dropped"` // dropped from the trajectory, oldest first
}

// ServerState is one backend in State.
type ServerState struct {
	Name      string   `json:"name"`
	URL       string   `json:"url"`
	Healthy   bool     `json:"healthy"`
	LastError string   `json:"last_error,omitempty"`
	Card      bool     `json:"card"`  // serves its own card (else one is synthesized)
	Data      bool     `json:"data"`  // has a data plane
	Tools     []string `json:"tools"` // the gateway's names of its tools
}

// State reports the backends, the tool union and the role rules.
func (g *Gateway) State() State {
	u := g.currentUnion()
	st := State{
		Name: g.cfg.Name, Mode: g.cfg.Mode, Serialize: g.cfg.Serialize, ToolNames: g.cfg.ToolNames,
		Tools:    make([]envproto.Tool, 0, len(u.tools)),
		Roles:    g.roles.snapshot(),
		Websites: g.websiteStates(),
	}
	st.Calls, st.CallsDropped = g.traj.counts()
	names := make(map[*backend][]string)
	for _, r := range u.tools {
		st.Tools = append(st.Tools, cardTool(r.tool, r.public, r.backend.name))
		names[r.backend] = append(names[r.backend], r.public)
	}
	for _, b := range g.backends {
		b.mu.Lock()
		ss := ServerState{
			Name: b.name, URL: b.url, Healthy: b.healthy, LastError: b.lastErr,
			Card: b.hasCard, Data: b.dataURL != "", Tools: names[b],
		}
		b.mu.Unlock()
		if ss.Tools == nil {
			ss.Tools = []string{}
		}
		st.Servers = append(st.Servers, ss)
	}
	return st
}

func (g *Gateway) serveState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, g.State())
}

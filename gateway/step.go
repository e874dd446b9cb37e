package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Step is the body of POST /step: either a tool call or a tools listing.
type Step struct {
	Tool      string          `json:"tool,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"` // a JSON object
	ListTools bool            `json:"list_tools,omitempty"`
}

// StepTools is the answer of POST /step {"list_tools": true}: the tools the caller's role sees.
type StepTools struct {
	Tools []*mcp.Tool `json:"tools"`
}

func (g *Gateway) serveStep(w http.ResponseWriter, r *http.Request) {
	var req Step
	if err := decodeStrict(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	role := normRole(r.Header.Get(RoleHeader))
	if err := validRole(role); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case req.ListTools && req.Tool != "":
		writeError(w, http.StatusBadRequest, "set tool or list_tools, not both")
		return
	case req.ListTools:
		writeJSON(w, http.StatusOK, StepTools{Tools: g.toolsFor(role)})
		return
	case req.Tool == "":
		writeError(w, http.StatusBadRequest, "set tool or list_tools")
		return
	}
	if args := rawArgs(req.Arguments); args != nil {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(args, &obj); err != nil {
			writeError(w, http.StatusBadRequest, "arguments: want a JSON object")
			return
		}
	}
	res, err := g.call(r.Context(), callInfo{
		via: "step", role: role, session: r.Header.Get(SessionHeader),
		tool: req.Tool, args: req.Arguments,
	})
	if err != nil {
		writeError(w, stepStatus(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// stepStatus maps a call error to the HTTP status of /step.
func stepStatus(err error) int {
	var werr *jsonrpc.Error
	switch {
	case errors.Is(err, ErrToolNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrToolDisabled):
		return http.StatusForbidden
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.As(err, &werr) && werr.Code == jsonrpc.CodeInvalidParams:
		return http.StatusBadRequest
	default:
		return http.StatusBadGateway
	}
}

// Package wire is the part of Tenki's sandbox API (protobuf package tenki.sandbox.v1, served
// over Connect RPC) that provider/tenki and its emulator speak: the procedure names, the
// messages as plain Go structs in proto3 JSON (lowerCamelCase names, 64-bit integers as decimal
// strings, enums by name, timestamps in RFC 3339, durations as "Ns", bytes in base64), and
// Connect's "json" codec over them. The field names and numbers come from Tenki's public SDKs
// (the Go SDK github.com/TenkiCloud/tenki-sdk-go, the TypeScript SDK @tenkicloud/sandbox); only
// the fields agentenv reads or sends are here. A server built with connect-go accepts this
// codec as it does protojson, so it is the real protocol, not an approximation of it.
//
// The messages are shared by the client and the emulator on purpose: wire_test.go holds the
// exact JSON of each one, written from the SDKs' field names, so that a misspelt field fails
// there and not only against the real service.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The services and the procedures agentenv calls. The control plane (SandboxService) is served
// at the API endpoint; the data plane (SandboxSessionDataPlaneService) at the endpoint a session's
// credential names.
const (
	Service          = "tenki.sandbox.v1.SandboxService"
	DataPlaneService = "tenki.sandbox.v1.SandboxSessionDataPlaneService"

	CreateSession           = "/" + Service + "/CreateSession"
	GetSession              = "/" + Service + "/GetSession"
	ListWorkspaceSandboxes  = "/" + Service + "/ListWorkspaceSandboxes"
	TerminateSession        = "/" + Service + "/TerminateSession"
	ExposePort              = "/" + Service + "/ExposePort"
	ListExposedPorts        = "/" + Service + "/ListExposedPorts"
	CreateSessionCredential = "/" + Service + "/CreateSessionCredential"

	Run       = "/" + DataPlaneService + "/Run"
	WriteFile = "/" + DataPlaneService + "/WriteFile"
	ReadFile  = "/" + DataPlaneService + "/ReadFile"
)

// Headers the SDKs send. The API key goes in Authorization as a bearer token when it is a
// workspace key ("tk_..."), in X-Session-Token when it is a session token ("ory_st_..."), and as
// the tenki_session cookie otherwise (see SetAuth); a data-plane call carries the session's
// credential in SessionCert instead.
const (
	HeaderSessionToken     = "X-Session-Token"
	HeaderClientFamily     = "X-Tenki-Client-Family"
	HeaderClientGeneration = "X-Tenki-Client-Generation"
	HeaderSessionCert      = "x-tenki-session-cert"
	CookieName             = "tenki_session"
	ClientGeneration       = "workspace_v1"
)

// SetAuth sets the headers that carry token to Tenki's API, as the SDKs do, and names the client
// family.
func SetAuth(h interface{ Set(key, value string) }, token, family string) {
	h.Set(HeaderClientFamily, family)
	h.Set(HeaderClientGeneration, ClientGeneration)
	switch token = strings.TrimSpace(token); {
	case token == "":
	case strings.HasPrefix(token, "tk_"):
		h.Set("Authorization", "Bearer "+token)
	case strings.HasPrefix(token, "ory_st_"):
		h.Set(HeaderSessionToken, token)
	default:
		h.Set("Cookie", CookieName+"="+token)
	}
}

// Codec is Connect's "json" codec over this package's structs. A Strict codec refuses unknown
// fields (the emulator, so that a request the real service would not understand fails there);
// the client's ignores them, as protojson's discard option does, since the service may add some.
type Codec struct{ Strict bool }

// Name is "json", the codec name of application/json and application/connect+json.
func (Codec) Name() string { return "json" }

// Marshal encodes v with encoding/json.
func (Codec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes b into v; an empty body is the empty message.
func (c Codec) Unmarshal(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	if c.Strict {
		d.DisallowUnknownFields()
	}
	return d.Decode(v)
}

// Uint64 is a uint64 field: a decimal string in proto3 JSON; a number is read too.
type Uint64 uint64

// MarshalJSON writes u as a string.
func (u Uint64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatUint(uint64(u), 10) + `"`), nil
}

// UnmarshalJSON reads a string or a number.
func (u *Uint64) UnmarshalJSON(b []byte) error {
	n, err := strconv.ParseUint(strings.Trim(string(b), `"`), 10, 64)
	if err != nil {
		return fmt.Errorf("uint64 %s: %w", b, err)
	}
	*u = Uint64(n)
	return nil
}

// Int64 is an int64 field: a decimal string in proto3 JSON; a number is read too.
type Int64 int64

// MarshalJSON writes i as a string.
func (i Int64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(i), 10) + `"`), nil
}

// UnmarshalJSON reads a string or a number.
func (i *Int64) UnmarshalJSON(b []byte) error {
	n, err := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
	if err != nil {
		return fmt.Errorf("int64 %s: %w", b, err)
	}
	*i = Int64(n)
	return nil
}

// Duration is a google.protobuf.Duration: "90s", "0.5s" in proto3 JSON.
type Duration time.Duration

// MarshalJSON writes d as seconds with at most nine decimals.
func (d Duration) MarshalJSON() ([]byte, error) {
	s := strconv.FormatFloat(time.Duration(d).Seconds(), 'f', -1, 64)
	return []byte(`"` + s + `s"`), nil
}

// UnmarshalJSON reads "Ns".
func (d *Duration) UnmarshalJSON(b []byte) error {
	s, ok := strings.CutSuffix(strings.Trim(string(b), `"`), "s")
	f, err := strconv.ParseFloat(s, 64)
	if !ok || err != nil {
		return fmt.Errorf("duration %s: want seconds such as \"90s\"", b)
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

// enum reads a proto3 JSON enum value, its name or its number, into the name.
func enum(b []byte, names []string) (string, error) {
	if len(b) > 0 && b[0] == '"' {
		var s string
		err := json.Unmarshal(b, &s)
		return s, err
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 0 || n >= len(names) || names[n] == "" {
		return "", fmt.Errorf("enum value %s: unknown", b)
	}
	return names[n], nil
}

// SessionState is tenki.sandbox.v1.SessionState.
type SessionState string

// Session states, by name.
const (
	StateUnspecified  SessionState = "SESSION_STATE_UNSPECIFIED"
	StateCreating     SessionState = "SESSION_STATE_CREATING"
	StateRunning      SessionState = "SESSION_STATE_RUNNING"
	StatePaused       SessionState = "SESSION_STATE_PAUSED"
	StateTerminating  SessionState = "SESSION_STATE_TERMINATING"
	StateTerminated   SessionState = "SESSION_STATE_TERMINATED"
	StatePausing      SessionState = "SESSION_STATE_PAUSING"
	StateResuming     SessionState = "SESSION_STATE_RESUMING"
	StateUserShutdown SessionState = "SESSION_STATE_USER_SHUTDOWN"
)

// sessionStates are the names by number (2 is not used).
var sessionStates = []string{
	0: string(StateUnspecified), 1: string(StateCreating), 3: string(StateRunning), 4: string(StatePaused),
	5: string(StateTerminating), 6: string(StateTerminated), 7: string(StatePausing), 8: string(StateResuming),
	9: string(StateUserShutdown),
}

// UnmarshalJSON reads the state's name or number.
func (s *SessionState) UnmarshalJSON(b []byte) error {
	name, err := enum(b, sessionStates)
	*s = SessionState(name)
	return err
}

// Ended reports whether a session in state s has ended for good (terminating or terminated).
func (s SessionState) Ended() bool { return s == StateTerminating || s == StateTerminated }

// RouteStatus is tenki.sandbox.v1.DataPlaneRouteStatus.
type RouteStatus string

// Data-plane route statuses, by name.
const (
	RouteUnspecified RouteStatus = "DATA_PLANE_ROUTE_STATUS_UNSPECIFIED"
	RouteVerified    RouteStatus = "DATA_PLANE_ROUTE_STATUS_VERIFIED"
	RouteNotReady    RouteStatus = "DATA_PLANE_ROUTE_STATUS_NOT_READY"
	RouteFailed      RouteStatus = "DATA_PLANE_ROUTE_STATUS_FAILED"
)

var routeStatuses = []string{string(RouteUnspecified), string(RouteVerified), string(RouteNotReady), string(RouteFailed)}

// UnmarshalJSON reads the status's name or number.
func (s *RouteStatus) UnmarshalJSON(b []byte) error {
	name, err := enum(b, routeStatuses)
	*s = RouteStatus(name)
	return err
}

// CreateSessionRequest is tenki.sandbox.v1.CreateSessionRequest (the fields agentenv sends).
type CreateSessionRequest struct {
	OwnerID       string            `json:"ownerId,omitempty"`
	OwnerType     string            `json:"ownerType,omitempty"`
	AllowInbound  *bool             `json:"allowInbound,omitempty"`
	AllowOutbound *bool             `json:"allowOutbound,omitempty"`
	MaxDuration   *Duration         `json:"maxDuration,omitempty"`
	CPUCores      *int32            `json:"cpuCores,omitempty"`
	MemoryMB      *int32            `json:"memoryMb,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Name          string            `json:"name,omitempty"`
	RegistryRef   *string           `json:"registryRef,omitempty"`
	Tags          []string          `json:"tags,omitempty"`
	// WaitReady holds the answer until the session runs, with its data plane primed.
	WaitReady bool `json:"waitReady,omitempty"`
}

// SessionCredential is tenki.sandbox.v1.SessionCredential: what a data-plane call carries.
type SessionCredential struct {
	Credential string     `json:"credential,omitempty"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
}

// CreateSessionResponse is tenki.sandbox.v1.CreateSessionResponse.
type CreateSessionResponse struct {
	Session           *Session           `json:"session,omitempty"`
	DataPlaneEndpoint string             `json:"dataPlaneEndpoint,omitempty"`
	Credential        *SessionCredential `json:"credential,omitempty"`
	RouteStatus       RouteStatus        `json:"routeStatus,omitempty"`
}

// Session is tenki.sandbox.v1.SandboxSession (the fields agentenv reads).
type Session struct {
	ID             string            `json:"id,omitempty"`
	State          SessionState      `json:"state,omitempty"`
	Name           string            `json:"name,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Tags           []string          `json:"tags,omitempty"`
	CreatedAt      *time.Time        `json:"createdAt,omitempty"`
	TerminatedAt   *time.Time        `json:"terminatedAt,omitempty"`
	TimeoutAt      *time.Time        `json:"timeoutAt,omitempty"`
	InboundEnabled bool              `json:"inboundEnabled,omitempty"`
	CPUCores       int32             `json:"cpuCores,omitempty"`
	MemoryMB       int32             `json:"memoryMb,omitempty"`
	TerminalError  string            `json:"terminalError,omitempty"`
}

// SessionID is the request of GetSession, TerminateSession, ListExposedPorts and
// CreateSessionCredential (GetSessionRequest, ...), whose one field is the session's id.
type SessionID struct {
	SessionID string `json:"sessionId"`
}

// SessionAnswer is the answer of GetSession and TerminateSession (GetSessionResponse,
// TerminateSessionResponse): the session.
type SessionAnswer struct {
	Session *Session `json:"session,omitempty"`
}

// ListWorkspaceSandboxesRequest is tenki.sandbox.v1.ListWorkspaceSandboxesRequest, the listing
// both SDKs' List use.
type ListWorkspaceSandboxesRequest struct {
	WorkspaceID       string   `json:"workspaceId,omitempty"`
	PageSize          int32    `json:"pageSize,omitempty"`
	PageToken         string   `json:"pageToken,omitempty"`
	IncludeTerminated bool     `json:"includeTerminated,omitempty"`
	Tags              []string `json:"tags,omitempty"`
}

// ListWorkspaceSandboxesResponse is tenki.sandbox.v1.ListWorkspaceSandboxesResponse.
type ListWorkspaceSandboxesResponse struct {
	Sessions      []*Session `json:"sessions,omitempty"`
	NextPageToken string     `json:"nextPageToken,omitempty"`
}

// ExposePortRequest is tenki.sandbox.v1.ExposePortRequest.
type ExposePortRequest struct {
	SessionID string `json:"sessionId"`
	Port      int32  `json:"port"`
}

// PortExposure is tenki.sandbox.v1.PortExposure, and the fields of ExposePortResponse agentenv
// reads: a guest port and the preview URL it is reached at.
type PortExposure struct {
	Port       int32  `json:"port,omitempty"`
	PreviewURL string `json:"previewUrl,omitempty"`
}

// ListExposedPortsResponse is tenki.sandbox.v1.ListExposedPortsResponse.
type ListExposedPortsResponse struct {
	Ports []*PortExposure `json:"ports,omitempty"`
}

// CreateSessionCredentialResponse is tenki.sandbox.v1.CreateSessionCredentialResponse: a fresh
// credential and the endpoint of the session's data plane.
type CreateSessionCredentialResponse struct {
	Credential        *SessionCredential `json:"credential,omitempty"`
	DataPlaneEndpoint string             `json:"dataPlaneEndpoint,omitempty"`
	RouteStatus       RouteStatus        `json:"routeStatus,omitempty"`
}

// RunCall and RunAnswer are the data plane's Run messages, both ways:
// SandboxSessionDataPlaneServiceRunRequest and ...RunResponse, each one frame.
type (
	RunCall struct {
		Frame *RunRequest `json:"frame,omitempty"`
	}
	RunAnswer struct {
		Frame *RunResponse `json:"frame,omitempty"`
	}
)

// RunRequest is tenki.sandbox.v1.RunRequest: one of a start, stdin bytes or the end of stdin.
type RunRequest struct {
	Start      *RunStart `json:"start,omitempty"`
	Stdin      []byte    `json:"stdin,omitempty"`
	StdinClose bool      `json:"stdinClose,omitempty"`
}

// RunStart is tenki.sandbox.v1.RunStart: the command, run as the sandbox user unless
// Privileged.
type RunStart struct {
	SessionID   string            `json:"sessionId"`
	Cmd         []string          `json:"cmd"`
	Cwd         string            `json:"cwd,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	StreamStdin bool              `json:"streamStdin,omitempty"`
	TimeoutMs   uint32            `json:"timeoutMs,omitempty"`
	Privileged  bool              `json:"privileged,omitempty"`
}

// RunResponse is tenki.sandbox.v1.RunResponse: one of started, stdout or stderr bytes, exit,
// or a stdin flow-control grant.
type RunResponse struct {
	Started *RunStarted `json:"started,omitempty"`
	Stdout  []byte      `json:"stdout,omitempty"`
	Stderr  []byte      `json:"stderr,omitempty"`
	Exit    *RunExit    `json:"exit,omitempty"`
	Flow    *RunFlow    `json:"flow,omitempty"`
}

// RunStarted is tenki.sandbox.v1.RunStarted.
type RunStarted struct {
	PID              Uint64 `json:"pid,omitempty"`
	StdinWindowBytes uint32 `json:"stdinWindowBytes,omitempty"`
}

// RunExit is tenki.sandbox.v1.RunExit. Reason is "exit" for a process that exited; a reason
// starting "capability_unavailable" or "first_frame_timeout" means it never ran.
type RunExit struct {
	ExitCode   int32  `json:"exitCode,omitempty"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timedOut,omitempty"`
	DurationMs Uint64 `json:"durationMs,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Errno      int32  `json:"errno,omitempty"`
}

// RunFlow is tenki.sandbox.v1.RunFlowControl.
type RunFlow struct {
	StdinGrantBytes uint32 `json:"stdinGrantBytes,omitempty"`
}

// The data plane wraps its file messages in one field each
// (SandboxSessionDataPlaneServiceWriteFileRequest{request}, ...).
type (
	WriteFileCall struct {
		Request *WriteFileRequest `json:"request,omitempty"`
	}
	WriteFileAnswer struct {
		Response *WriteFileResponse `json:"response,omitempty"`
	}
	ReadFileCall struct {
		Request *ReadFileRequest `json:"request,omitempty"`
	}
	ReadFileAnswer struct {
		Response *ReadFileResponse `json:"response,omitempty"`
	}
)

// WriteFileRequest is tenki.sandbox.v1.WriteFileRequest: the whole file in one message.
type WriteFileRequest struct {
	SessionID string `json:"sessionId"`
	Path      string `json:"path"`
	Content   []byte `json:"content,omitempty"`
}

// WriteFileResponse is tenki.sandbox.v1.WriteFileResponse.
type WriteFileResponse struct {
	Path      string `json:"path,omitempty"`
	SizeBytes Int64  `json:"sizeBytes,omitempty"`
}

// ReadFileRequest is tenki.sandbox.v1.ReadFileRequest.
type ReadFileRequest struct {
	SessionID string `json:"sessionId"`
	Path      string `json:"path"`
}

// ReadFileResponse is tenki.sandbox.v1.ReadFileResponse.
type ReadFileResponse struct {
	Path    string `json:"path,omitempty"`
	Content []byte `json:"content,omitempty"`
}

package wire

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// TestMessagesInProto3JSON pins each message's JSON to the field names of Tenki's protos (the
// SDKs' generated code: json=ownerId, json=maxDuration, ...), with proto3 JSON's forms of
// durations, 64-bit integers, bytes and enums.
func TestMessagesInProto3JSON(t *testing.T) {
	yes, hour, cores, mb, image := true, Duration(time.Hour+500*time.Millisecond), int32(2), int32(1024), "ws/img:1"
	at := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		msg  any
		want string
	}{
		{"CreateSessionRequest", CreateSessionRequest{OwnerID: "self", OwnerType: "SERVICE", AllowInbound: &yes, MaxDuration: &hour,
			CPUCores: &cores, MemoryMB: &mb, Metadata: map[string]string{"agentenv.record": "r1"}, Name: "r1", RegistryRef: &image,
			Tags: []string{"agentenv"}, WaitReady: true},
			`{"ownerId":"self","ownerType":"SERVICE","allowInbound":true,"maxDuration":"3600.5s","cpuCores":2,"memoryMb":1024,` +
				`"metadata":{"agentenv.record":"r1"},"name":"r1","registryRef":"ws/img:1","tags":["agentenv"],"waitReady":true}`},
		{"SessionID", SessionID{SessionID: "ses_1"}, `{"sessionId":"ses_1"}`},
		{"ListWorkspaceSandboxesRequest", ListWorkspaceSandboxesRequest{PageSize: 100, PageToken: "2", Tags: []string{"agentenv"}},
			`{"pageSize":100,"pageToken":"2","tags":["agentenv"]}`},
		{"ExposePortRequest", ExposePortRequest{SessionID: "ses_1", Port: 8080}, `{"sessionId":"ses_1","port":8080}`},
		{"RunStart", RunCall{Frame: &RunRequest{Start: &RunStart{SessionID: "ses_1", Cmd: []string{"sh", "-c", "exit 3"},
			Env: map[string]string{"A": "b"}, StreamStdin: true, Privileged: true}}},
			`{"frame":{"start":{"sessionId":"ses_1","cmd":["sh","-c","exit 3"],"env":{"A":"b"},"streamStdin":true,"privileged":true}}}`},
		{"RunStdin", RunCall{Frame: &RunRequest{Stdin: []byte("hi\n")}}, `{"frame":{"stdin":"aGkK"}}`},
		{"RunStdinClose", RunCall{Frame: &RunRequest{StdinClose: true}}, `{"frame":{"stdinClose":true}}`},
		{"RunStarted", RunAnswer{Frame: &RunResponse{Started: &RunStarted{PID: 42}}}, `{"frame":{"started":{"pid":"42"}}}`},
		{"RunExit", RunAnswer{Frame: &RunResponse{Exit: &RunExit{ExitCode: 3, DurationMs: 7, Reason: "exit"}}},
			`{"frame":{"exit":{"exitCode":3,"durationMs":"7","reason":"exit"}}}`},
		{"WriteFile", WriteFileCall{Request: &WriteFileRequest{SessionID: "ses_1", Path: "/tmp/f", Content: []byte{0, 255}}},
			`{"request":{"sessionId":"ses_1","path":"/tmp/f","content":"AP8="}}`},
		{"ReadFile", ReadFileCall{Request: &ReadFileRequest{SessionID: "ses_1", Path: "/tmp/f"}}, `{"request":{"sessionId":"ses_1","path":"/tmp/f"}}`},
		{"SessionCredential", SessionCredential{Credential: "c", ExpiresAt: &at}, `{"credential":"c","expiresAt":"2026-12-02T06:00:00Z"}`},
	} {
		b, err := json.Marshal(tt.msg)
		if err != nil || string(b) != tt.want {
			t.Errorf("%s = %s, %v\nwant %s", tt.name, b, err, tt.want)
		}
	}
}

// TestAnswersAsTheServiceWritesThem reads answers in both forms a proto3 JSON writer may use:
// enums by name or number, 64-bit integers as strings or numbers, and fields agentenv does not
// know (ignored by the client's codec, refused by the emulator's).
func TestAnswersAsTheServiceWritesThem(t *testing.T) {
	var got CreateSessionResponse
	in := `{"session":{"id":"ses_1","state":"SESSION_STATE_RUNNING","name":"r1","metadata":{"k":"v"},"createdAt":"2026-12-02T06:00:00.123Z",` +
		`"sticky":false,"pauseRetention":"60s"},"dataPlaneEndpoint":"https://dp","credential":{"credential":"c"},"routeStatus":1}`
	if err := (Codec{}).Unmarshal([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	if s := got.Session; s.ID != "ses_1" || s.State != StateRunning || s.Metadata["k"] != "v" || s.CreatedAt == nil || got.RouteStatus != RouteVerified {
		t.Errorf("decoded %+v %+v", got, got.Session)
	}
	var st SessionState
	if err := json.Unmarshal([]byte(`6`), &st); err != nil || st != StateTerminated || !st.Ended() {
		t.Errorf("state 6 = %q, %v; want terminated", st, err)
	}
	if err := json.Unmarshal([]byte(`2`), &st); err == nil {
		t.Errorf("state 2 (unused) = %q, want an error", st)
	}
	var exit RunExit
	if err := json.Unmarshal([]byte(`{"exitCode":1,"durationMs":12}`), &exit); err != nil || exit.DurationMs != 12 {
		t.Errorf("exit with a numeric durationMs = %+v, %v", exit, err)
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"1.5s"`), &d); err != nil || time.Duration(d) != 1500*time.Millisecond {
		t.Errorf("duration 1.5s = %v, %v", time.Duration(d), err)
	}
	if err := (Codec{Strict: true}).Unmarshal([]byte(`{"sessionId":"a","bogus":1}`), &SessionID{}); err == nil {
		t.Error("the strict codec read an unknown field")
	}
	if (Codec{}).Name() != "json" {
		t.Error("the codec is not named json")
	}
}

func TestSetAuthAsTheSDKs(t *testing.T) {
	for token, want := range map[string][2]string{
		"tk_abc":     {"Authorization", "Bearer tk_abc"},
		"ory_st_abc": {HeaderSessionToken, "ory_st_abc"},
		"cookieval":  {"Cookie", "tenki_session=cookieval"},
	} {
		h := http.Header{}
		SetAuth(h, token, "agentenv")
		if h.Get(want[0]) != want[1] || h.Get(HeaderClientFamily) != "agentenv" || h.Get(HeaderClientGeneration) != "workspace_v1" {
			t.Errorf("SetAuth(%s) = %v, want %s: %s", token, h, want[0], want[1])
		}
	}
}

package engine

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// A trace message as an engine (20.10, API 1.41) sent it for `RUN echo hello > /x && echo
// building`: one log of the RUN's vertex, "building\n".
const capturedTrace = "GmQKR3NoYTI1Njo5NDEwM2QwNDIzMjRjMGQxOGRmNGM1NWVkMGMxMWVhNGE5NmY5MTMyMzc2NjBkNTEwNTIzOTAxN2FhZTE5MmM2EgwI0frO2AYQnPqpkgMYASIJYnVpbGRpbmcK"

func traceAux(t *testing.T, b64 string) json.RawMessage {
	t.Helper()
	aux, err := json.Marshal(b64)
	if err != nil {
		t.Fatal(err)
	}
	return aux
}

func TestBuildKitLogs(t *testing.T) {
	got, err := buildKitLogs(traceAux(t, capturedTrace))
	if err != nil || string(got) != "building\n" {
		t.Errorf("captured trace: logs %q, %v; want %q", got, err, "building\n")
	}

	// Two logs after a vertex (whose name is not output), in order.
	logMsg := func(vertex, msg string) []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		b = protowire.AppendString(b, vertex)
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
		b = protowire.AppendTag(b, vertexLogMsg, protowire.BytesType)
		return protowire.AppendBytes(b, []byte(msg))
	}
	vertex := protowire.AppendTag(nil, 3, protowire.BytesType)
	vertex = protowire.AppendString(vertex, "[2/3] RUN make")
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.BytesType)
	msg = protowire.AppendBytes(msg, vertex)
	for _, l := range []string{"compiling\n", "error: no rule\n"} {
		msg = protowire.AppendTag(msg, statusLogsField, protowire.BytesType)
		msg = protowire.AppendBytes(msg, logMsg("sha256:x", l))
	}
	got, err = buildKitLogs(traceAux(t, base64.StdEncoding.EncodeToString(msg)))
	if err != nil || string(got) != "compiling\nerror: no rule\n" {
		t.Errorf("built trace: logs %q, %v", got, err)
	}

	for _, bad := range []string{"!!!", base64.StdEncoding.EncodeToString([]byte{0x1a, 0x05, 0x01})} {
		if _, err := buildKitLogs(traceAux(t, bad)); err == nil {
			t.Errorf("buildKitLogs(%q) = nil error", bad)
		}
	}
}

// A failed BuildKit build's error ends with what its commands printed.
func TestReadBuildTailBuildKit(t *testing.T) {
	stream := `{"id":"moby.buildkit.trace","aux":"` + capturedTrace + `"}` + "\n" +
		`{"errorDetail":{"message":"executor failed running [/bin/sh -c exit 3]: exit code: 3"},"error":"executor failed"}` + "\n"
	err := ReadBuildTail(strings.NewReader(stream), 5)
	if err == nil || !strings.Contains(err.Error(), "exit code: 3") || !strings.HasSuffix(err.Error(), "\n  building") {
		t.Errorf("ReadBuildTail = %v, want the error then the line building", err)
	}
}

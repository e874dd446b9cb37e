package engine

import (
	"encoding/base64"
	"encoding/json"
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// BuildKitTrace is the id of the messages in which an engine's BuildKit builder streams its
// progress: the aux value is a base64 string of BuildKit's control.StatusResponse protobuf.
const BuildKitTrace = "moby.buildkit.trace"

// Field numbers of the two BuildKit messages the build output is read from (buildkit's
// api/services/control/control.proto): StatusResponse.logs and VertexLog.msg. The rest of the
// trace (vertices, progress, warnings) is not needed for a failed build's last lines.
const (
	statusLogsField = 3
	vertexLogMsg    = 4
)

// buildKitLogs returns the output bytes a BuildKit trace message carries (what the build's
// commands printed), in order; nil for a trace with none.
func buildKitLogs(aux json.RawMessage) ([]byte, error) {
	var b64 string
	if err := json.Unmarshal(aux, &b64); err != nil {
		return nil, err
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, err
	}
	var out []byte
	err = eachField(raw, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != statusLogsField || typ != protowire.BytesType {
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if num == vertexLogMsg && typ == protowire.BytesType {
				out = append(out, v...)
			}
			return nil
		})
	})
	return out, err
}

// eachField calls fn with each field of the protobuf message b: its number, wire type, and for
// a length-delimited field its bytes (nil for the others, which are skipped).
func eachField(b []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errors.New("buildkit trace: bad field tag")
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errors.New("buildkit trace: bad field value")
		}
		b = b[n:]
		if err := fn(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

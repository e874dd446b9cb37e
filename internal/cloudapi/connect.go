package cloudapi

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// The Connect protocol's server streams (https://connectrpc.com/docs/protocol), in JSON: each
// message is an envelope, a flags byte and a big-endian length before it; the last one has
// FlagEndStream set and tells whether the call failed ([EndStream]). Send a stream's request with Content-Type
// ConnectStreamJSON and the header Connect-Protocol-Version: 1.
const (
	ConnectStreamJSON = "application/connect+json"
	FlagEndStream     = 0x02
	// MaxMessage bounds one message read by ReadEnvelope.
	MaxMessage = 16 << 20
)

// WriteEnvelope writes msg as one envelope with no flags.
func WriteEnvelope(w io.Writer, msg []byte) error {
	var head [5]byte
	binary.BigEndian.PutUint32(head[1:], uint32(len(msg)))
	if _, err := w.Write(head[:]); err != nil {
		return err
	}
	_, err := w.Write(msg)
	return err
}

// ReadEnvelope reads one envelope: its flags and its message, at most MaxMessage bytes.
func ReadEnvelope(r *bufio.Reader) (flags byte, msg []byte, err error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n > MaxMessage {
		return 0, nil, fmt.Errorf("message of %d bytes", n)
	}
	msg = make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return 0, nil, err
	}
	return head[0], msg, nil
}

// endStream is the message of a stream's last envelope: Error is set when the call failed.
type endStream struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// EndStream decodes msg, the message of an envelope with FlagEndStream, and returns the call's
// error as "CODE: MESSAGE", or nil when it carries none (or is not JSON).
func EndStream(msg []byte) error {
	var es endStream
	if json.Unmarshal(msg, &es) == nil && es.Error != nil {
		return fmt.Errorf("%s: %s", es.Error.Code, es.Error.Message)
	}
	return nil
}

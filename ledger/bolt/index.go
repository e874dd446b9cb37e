package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	bbolt "go.etcd.io/bbolt"
)

// An index key is the creation time (timeLen bytes), the insertion sequence (seqLen bytes) and
// the id, so that keys sort by creation time, then by first insertion.
const (
	timeLen = 12 // seconds since 1970 with the sign bit flipped, then nanoseconds; big-endian
	seqLen  = 8
)

// timeLayout writes the time of a cursor: fixed-width RFC 3339 in UTC with nanoseconds.
const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// timeKey encodes t so that byte order is time order, for any time.
func timeKey(t time.Time) []byte {
	b := make([]byte, timeLen, timeLen+seqLen)
	binary.BigEndian.PutUint64(b, uint64(t.Unix())^(1<<63))
	binary.BigEndian.PutUint32(b[8:], uint32(t.Nanosecond()))
	return b
}

// positionKey is the start of the index keys of the entry created at t with sequence seq.
func positionKey(t time.Time, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(timeKey(t), seq)
}

// indexKey is the index key of the entry id created at t with sequence seq.
func indexKey(t time.Time, seq uint64, id string) []byte {
	return append(positionKey(t, seq), id...)
}

// keyID returns the id of an index key.
func keyID(k []byte) []byte { return k[timeLen+seqLen:] }

// keyCursor returns the Page cursor of the entry with index key k: its creation time and
// sequence, "TIME/SEQ".
func keyCursor(k []byte) string {
	sec := int64(binary.BigEndian.Uint64(k) ^ (1 << 63))
	t := time.Unix(sec, int64(binary.BigEndian.Uint32(k[8:]))).UTC()
	return t.Format(timeLayout) + "/" + strconv.FormatUint(binary.BigEndian.Uint64(k[timeLen:]), 10)
}

// parseCursor returns the position key of a cursor made by keyCursor, or an error wrapping
// agentenv.ErrInvalid.
func parseCursor(c string) ([]byte, error) {
	created, seq, ok := strings.Cut(c, "/")
	n, err := strconv.ParseUint(seq, 10, 64)
	t, terr := time.Parse(time.RFC3339Nano, created)
	if !ok || err != nil || terr != nil {
		return nil, fmt.Errorf("cursor %q: %w", c, agentenv.ErrInvalid)
	}
	return positionKey(t, n), nil
}

// span is a stretch of an index to walk. Nil bounds are open.
type span struct {
	oldest bool   // oldest first, else newest first
	from   []byte // keys at or after this
	to     []byte // keys before this
	after  []byte // keys past this position (a cursor), in the walk's direction
}

// walk calls fn with the key and value of each entry of the index that c walks within sp, in
// sp's order, until fn returns false.
func walk(c *bbolt.Cursor, sp span, fn func(k, v []byte) bool) {
	if sp.oldest {
		walkOldest(c, sp, fn)
		return
	}
	upper := sp.to
	if sp.after != nil && (upper == nil || bytes.Compare(sp.after, upper) < 0) {
		upper = sp.after
	}
	var k, v []byte
	if upper == nil {
		k, v = c.Last()
	} else if k, _ = c.Seek(upper); k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev() // keys are longer than any bound, so never equal to one
	}
	for ; k != nil && (sp.from == nil || bytes.Compare(k, sp.from) >= 0); k, v = c.Prev() {
		if !fn(k, v) {
			return
		}
	}
}

// walkOldest is walk oldest first.
func walkOldest(c *bbolt.Cursor, sp span, fn func(k, v []byte) bool) {
	lower := sp.from
	if sp.after != nil && (lower == nil || bytes.Compare(sp.after, lower) > 0) {
		lower = sp.after
	}
	var k, v []byte
	if lower == nil {
		k, v = c.First()
	} else {
		k, v = c.Seek(lower)
	}
	for sp.after != nil && k != nil && bytes.HasPrefix(k, sp.after) {
		k, v = c.Next() // the cursor's own entry
	}
	for ; k != nil && (sp.to == nil || bytes.Compare(k, sp.to) < 0); k, v = c.Next() {
		if !fn(k, v) {
			return
		}
	}
}

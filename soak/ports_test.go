package soak

import (
	"strings"
	"testing"
)

func TestParseListening(t *testing.T) {
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:8157 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:8158 0100007F:9999 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0
   2: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1
`
	got, err := ParseListening(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0x8157] || !got[8080] || got[0x8158] {
		t.Errorf("ParseListening = %v, want {33111, 8080}", got)
	}
	if _, err := ParseListening(strings.NewReader("h\n 0: 0100007F:ZZZZ 0 0A\n")); err == nil {
		t.Error("ParseListening of a bad port: nil error")
	}
}

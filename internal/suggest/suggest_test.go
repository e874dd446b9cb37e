package suggest

import "testing"

func TestDidYouMean(t *testing.T) {
	known := []string{"image", "command", "port", "transport"}
	tests := []struct{ in, want string }{
		{"imgae", ` (did you mean "image"?)`},    // transposition
		{"IMAGE", ` (did you mean "image"?)`},    // case
		{"comand", ` (did you mean "command"?)`}, // deletion
		{"prot", ` (did you mean "port"?)`},
		{"xyz", ""},
		{"", ""},
		{"port", ""}, // the name itself: right, but used where it may not be
	}
	for _, tt := range tests {
		if got := DidYouMean(tt.in, known); got != tt.want {
			t.Errorf("DidYouMean(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got, d := Closest("ledger.dns", []string{"ledger.dsn", "log.level"}); got != "ledger.dsn" || d != 1 {
		t.Errorf("Closest = %q, %d", got, d)
	}
}

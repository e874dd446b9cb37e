package shellquote_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/internal/shellquote"
)

func TestJoinReadsBackThroughTheShell(t *testing.T) {
	args := []string{"plain", "with space", "it's", `"double"`, "$HOME", "`date`", "a\nb", "", `back\slash`, "*"}
	// printf prints each argument on a line of its own, NUL-terminated so newlines survive.
	out, err := exec.Command("/bin/sh", "-c", "printf '%s\\0' "+shellquote.Join(args)).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !slices.Equal(got, args) {
		t.Errorf("the shell read back %q, want %q", got, args)
	}
}

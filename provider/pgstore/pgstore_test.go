package pgstore

import (
	"strings"
	"testing"
)

func TestRoleName(t *testing.T) {
	db := DatabaseName("servicedb-0123456789ab")
	long := strings.Repeat("s", 63)
	a, b := RoleName(db, long), RoleName(db, long+"x")
	if len(a) > 63 || len(b) > 63 || a == b {
		t.Errorf("RoleName of long names = %q, %q: want distinct names of at most 63 bytes", a, b)
	}
	if got := RoleName(db, "notes"); !strings.HasPrefix(got, RolePrefix(db)) || !strings.HasSuffix(got, "_notes") {
		t.Errorf("RoleName(notes) = %q, want %s…_notes", got, RolePrefix(db))
	}
	if RoleName(DatabaseName("servicedb-other"), "notes") == RoleName(db, "notes") {
		t.Error("two databases' roles share a name")
	}
}

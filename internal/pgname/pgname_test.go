package pgname

import (
	"strings"
	"testing"
)

func TestRole(t *testing.T) {
	db := Database("servicedb-0123456789ab")
	long := strings.Repeat("s", 63)
	a, b := Role(db, long), Role(db, long+"x")
	if len(a) > 63 || len(b) > 63 || a == b {
		t.Errorf("Role of long names = %q, %q: want distinct names of at most 63 bytes", a, b)
	}
	if got := Role(db, "notes"); !strings.HasPrefix(got, RolePrefix(db)) || !strings.HasSuffix(got, "_notes") {
		t.Errorf("Role(notes) = %q, want %s…_notes", got, RolePrefix(db))
	}
	if Role(Database("servicedb-other"), "notes") == Role(db, "notes") {
		t.Error("two databases' roles share a name")
	}
}

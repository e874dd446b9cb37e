package postgres_test

import (
	"strings"
	"testing"

	"github.com/agentenv/agentenv/ledger/postgres"
)

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://agentenv:s3cret@127.0.0.1:5432/db?sslmode=disable", "postgres://agentenv:xxxxx@127.0.0.1:5432/db?sslmode=disable"},
		{"postgresql://u@host/db", "postgresql://u@host/db"},
		{"postgres://u@host/db?password=s3cret&sslmode=disable", "postgres://u@host/db?password=xxxxx&sslmode=disable"},
		{"host=h user=u password=s3cret dbname=d", "host=h user=u password=xxxxx dbname=d"},
		{"host=h password = 's3 cret\\' x' dbname=d", "host=h password = xxxxx dbname=d"},
		{"host=h dbname=d", "host=h dbname=d"},
		{"postgres://u:s3cret@host:notaport/db", "postgres://u:xxxxx@host:notaport/db"},
		{"postgres://u:s3/cr@t@host/db?PASSWORD=s3cret#x", "postgres://u:xxxxx@host/db?PASSWORD=xxxxx#x"},
		{"mysql://root:s3cret@db/x", "mysql://root:xxxxx@db/x"},
	}
	for _, tt := range tests {
		got := postgres.Redact(tt.in)
		if got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.Contains(got, "s3") {
			t.Errorf("Redact(%q) = %q still holds the password", tt.in, got)
		}
	}
}

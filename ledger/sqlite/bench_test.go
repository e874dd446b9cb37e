package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/ledgertest"
	"github.com/agentenv/agentenv/ledger/sqlite"
)

// BenchmarkLedger measures Put, Get, Update and a List of 1,000 records, to compare stores.
func BenchmarkLedger(b *testing.B) {
	ledgertest.Bench(b, func(b *testing.B) agentenv.Ledger {
		l, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "ledger.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return l
	})
}

package ledgertest

import (
	"fmt"
	"testing"

	"github.com/agentenv/agentenv"
)

// BenchRecords is how many records the List benchmark lists.
const BenchRecords = 1000

// Bench measures the operations of a ledger every command makes, as sub-benchmarks of b, each
// on a ledger of its own from open (as for Run): Put (a new record), Get, Update (one record,
// again and again) and List (all of BenchRecords records), so that stores can be compared.
func Bench(b *testing.B, open func(b *testing.B) agentenv.Ledger) {
	b.Run("Put", func(b *testing.B) {
		l := open(b)
		for i := 0; b.Loop(); i++ {
			if err := l.Put(b.Context(), benchRecord(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Get", func(b *testing.B) {
		l := open(b)
		benchFill(b, l, 1)
		for b.Loop() {
			if _, err := l.Get(b.Context(), "bench-0"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Update", func(b *testing.B) {
		l := open(b)
		benchFill(b, l, 1)
		for i := 0; b.Loop(); i++ {
			_, err := l.Update(b.Context(), "bench-0", func(r *agentenv.Record) error {
				r.Attrs["n"] = fmt.Sprint(i)
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("List%d", BenchRecords), func(b *testing.B) {
		l := open(b)
		benchFill(b, l, BenchRecords)
		for b.Loop() {
			rs, err := l.List(b.Context(), agentenv.Filter{})
			if err != nil || len(rs) != BenchRecords {
				b.Fatalf("List = %d records, %v; want %d", len(rs), err, BenchRecords)
			}
		}
	})
}

// benchFill puts n records, bench-0 to bench-(n-1).
func benchFill(b *testing.B, l agentenv.Ledger, n int) {
	b.Helper()
	for i := range n {
		if err := l.Put(b.Context(), benchRecord(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRecord is a record of a typical size, with labels and attributes.
func benchRecord(i int) agentenv.Record {
	id := fmt.Sprintf("bench-%d", i)
	return agentenv.Record{
		ID: id, Kind: agentenv.KindSandbox, Provider: "docker", SandboxID: "c0ffee" + id,
		Image: "agentenv/notes:1", Run: "run-1", Deployment: "dep-1", Role: "mcp_server:notes",
		State: agentenv.StateLive, Owner: agentenv.Owner{Host: "host@boot", PID: 4242, Start: 123456},
		Labels: map[string]string{agentenv.LabelRecord: id, agentenv.LabelRun: "run-1", agentenv.LabelDeployment: "dep-1"},
		Attrs:  map[string]string{"endpoint.8080": "127.0.0.1:49153"},
	}
}

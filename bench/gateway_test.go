package bench

import (
	"strings"
	"testing"
)

func TestGatewaySummary(t *testing.T) {
	out := `goos: linux
BenchmarkCall/sessions=1/direct-2  	    2000	    600000 ns/op	       644.5 cpu-µs/op	       400.0 p50-µs	      3251 p99-µs	  414385 B/op	     283 allocs/op
BenchmarkCall/sessions=1/gateway-2 	    2000	    900000 ns/op	       974.4 cpu-µs/op	     15698 gw-B/op	       192.4 gw-allocs/op	       307.5 gw-cpu-µs/op	       600.0 p50-µs	      4983 p99-µs	  445097 B/op	     494 allocs/op
BenchmarkCall/sessions=64/direct-2 	    2000	   1000000 ns/op	      1054 cpu-µs/op	    290554 p50-µs	   1288192 p99-µs	  412416 B/op	     280 allocs/op
BenchmarkCall/sessions=64/gateway-2         	    2000	   1200000 ns/op	       970.8 cpu-µs/op	     65502 p50-µs	    606381 p99-µs	  445011 B/op	     492 allocs/op
BenchmarkCall/sessions=1/direct#01-2  	    2000	    500000 ns/op	       600 cpu-µs/op	       300.0 p50-µs	      3000 p99-µs	  414385 B/op	     283 allocs/op
BenchmarkCall/sessions=1/gateway#01-2 	    2000	   1000000 ns/op	       900 cpu-µs/op	       700.0 p50-µs	      4000 p99-µs	  445097 B/op	     494 allocs/op
PASS`
	figs := ParseGatewayBench(out)
	if len(figs) != 6 {
		t.Fatalf("parsed %d figures, want 6: %+v", len(figs), figs)
	}
	if f := figs[1]; f.Path != "gateway" || f.Sessions != 1 || f.Run != 1 || f.NsPerOp != 900000 || f.CPU != 974.4 ||
		f.P50 != 600 || f.P99 != 4983 || f.Bytes != 445097 || f.Allocs != 494 || f.MidCPU != 307.5 || f.MidAllocs != 192.4 || f.MidBytes != 15698 {
		t.Errorf("figure = %+v", f)
	}
	if figs[4].Run != 2 {
		t.Errorf("second run of sessions=1 numbered %d", figs[4].Run)
	}
	rows := GatewaySummary(figs)
	if len(rows) != 2 || rows[0].Sessions != 1 || rows[1].Sessions != 64 {
		t.Fatalf("rows = %+v", rows)
	}
	r := rows[0]
	if r.PerCall != (Spread{Median: 1.75, Min: 1.5, Max: 2}) || r.AddedP50 != (Spread{Median: 300, Min: 200, Max: 400}) {
		t.Errorf("per call %+v, added p50 %+v", r.PerCall, r.AddedP50)
	}
	if r.Direct.P50 != 350 || r.Gateway.NsPerOp != 950000 {
		t.Errorf("medians: direct %+v gateway %+v", r.Direct, r.Gateway)
	}
	md := Markdown(Results{Gateway: figs, GatewayNote: "go test"})
	if !strings.Contains(md, "| 1 | 550 / 950 µs (1.75×, 1.50-2.00) | 350 / 650 µs (+300, 200 to 400)") {
		t.Errorf("markdown:\n%s", md)
	}
}

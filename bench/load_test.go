package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/soak"
)

func TestMarkdownHasTheLoadRows(t *testing.T) {
	res := Results{Load: []LoadFigure{
		{Episodes: 16, Passed: 16, Load: soak.Load{EpisodesPerMin: 12.5, ReadyP50: 3 * time.Second, ReadyP95: 5 * time.Second, MachinePeak: 3 << 30, RunnerPeak: 70 << 20}},
		{Episodes: 16, Store: true, Passed: 15, Load: soak.Load{EpisodesPerMin: 20}},
	}}
	md := Markdown(res)
	for _, want := range []string{
		"| 16 | a container each | 16 | 12.5 | 3000 ms / 5000 ms |",
		"| 16 | a state store's database | 15 | 20.0 |",
		"3.00 GiB", "70 MiB",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/soak"
)

func TestMarkdownHasTheHarborFigures(t *testing.T) {
	res := Results{}
	res.add(Measure{Name: HarborEpisodeAgentenv, Samples: []time.Duration{1200 * time.Millisecond, 1300 * time.Millisecond, 1100 * time.Millisecond}})
	res.add(Measure{Name: HarborEpisodeByHand, Samples: []time.Duration{1000 * time.Millisecond, 900 * time.Millisecond, 1100 * time.Millisecond}})
	res.Comparisons = []Comparison{{"harbor episode", HarborEpisodeAgentenv, HarborEpisodeByHand}}
	res.Harbor = []CorpusFigure{
		{Cache: "cold", Wall: 50 * time.Second, Tasks: 16, Failing: HarborFailing(), Builds: 9, FailedBuilds: 2},
		{Cache: "warm", Wall: 30 * time.Second, Tasks: 16, Failing: HarborFailing(), Builds: 0, FailedBuilds: 2},
	}
	md := Markdown(res)
	for _, want := range []string{
		"| harbor episode (agentenv, image cached) | 3 | 1200 ms | 1300 ms |",
		"| harbor episode | 1200 ms | 1000 ms | 1.20× |",
		"| cold | 16 | 3 | 50.0 s | 9 | 2 |",
		"| warm | 16 | 3 | 30.0 s | 0 | 2 |",
		"tasks check harbor/testdata/corpus --concurrency 4",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestHarborIsAStep(t *testing.T) {
	if !slices.Contains(Steps, "harbor") {
		t.Fatalf("Steps = %v, want harbor among them (for --only harbor)", Steps)
	}
	eng, err := soak.NewDocker("")
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	c := Config{Binary: "agentenv", Dir: t.TempDir(), EnvFile: "env.yaml", Engine: eng, Only: []string{"harbor"}}
	if err := c.defaults(); err != nil {
		t.Fatalf("--only harbor: %v", err)
	}
	if !slices.Equal(c.ImageMap, DefaultImageMap()) {
		t.Errorf("ImageMap = %v, want the default %v", c.ImageMap, DefaultImageMap())
	}
}

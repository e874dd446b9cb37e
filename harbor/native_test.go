package harbor

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentenv/agentenv"
)

// stepIDs are the ids of a native task's steps, in order.
func stepIDs(t *testing.T, dir string, o Options) []string {
	t.Helper()
	nt, err := LoadNative(filepath.Join("testdata/corpus", dir), o)
	if err != nil {
		t.Fatalf("LoadNative(%s, %+v): %v", dir, o, err)
	}
	var ids []string
	for _, s := range nt.Steps {
		ids = append(ids, s.ID+":"+s.Type)
	}
	return ids
}

func TestNativeSteps(t *testing.T) {
	for _, c := range []struct {
		dir  string
		o    Options
		want []string
	}{
		{"hello-file", Options{}, []string{"container:deploy_sandbox", "solution:upload", "agent:prompt_agent", "tests:upload", "verify:reward"}},
		{"hello-file", Options{Agent: AgentNop}, []string{"container:deploy_sandbox", "tests:upload", "verify:reward"}},
		{"hello-file", Options{Agent: AgentOpenAI}, []string{"container:deploy_sandbox", "agent:prompt_agent", "tests:upload", "verify:reward"}},
		{"hello-file", Options{Command: "my-agent"}, []string{"container:deploy_sandbox", "agent:prompt_agent", "tests:upload", "verify:reward"}},
		{"no-internet", Options{Agent: AgentNop}, []string{"network:deploy_network", "container:deploy_sandbox", "tests:upload", "verify:reward"}},
		{"multi-step", Options{Agent: AgentNop}, []string{"container:deploy_sandbox",
			"tests_1:upload", "tests_1_step:upload", "verify_1:reward", "tests_2:upload", "tests_2_step:upload", "verify_2:reward"}},
	} {
		if got := stepIDs(t, c.dir, c.o); !slices.Equal(got, c.want) {
			t.Errorf("%s %+v: steps %q\nwant %q", c.dir, c.o, got, c.want)
		}
	}
}

// A native task's File names its folder and options; loading it again gives the same task, and
// another agent gives another digest (a resumed group refuses a task run differently).
func TestNativeFileRoundTrip(t *testing.T) {
	a, err := LoadNative("testdata/corpus/hello-file", Options{Command: "run it"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadNative(a.File, Options{})
	if err != nil {
		t.Fatalf("LoadNative(%q): %v", a.File, err)
	}
	if a.Digest != b.Digest || a.File != b.File {
		t.Errorf("reloaded %q (%s), want %q (%s)", b.File, b.Digest, a.File, a.Digest)
	}
	if !IsNative(a.File) {
		t.Errorf("IsNative(%q) = false", a.File)
	}
	c, err := LoadNative("testdata/corpus/hello-file", Options{Agent: AgentNop})
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest == a.Digest {
		t.Errorf("nop and the command agent have one digest %s", c.Digest)
	}
}

func TestNativeRefuses(t *testing.T) {
	for _, o := range []Options{{Agent: "bogus"}, {Agent: AgentCommand}, {Agent: AgentNop, Command: "x"}} {
		if _, err := LoadNative("testdata/corpus/hello-file", o); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("LoadNative(%+v) = %v, want ErrInvalid", o, err)
		}
	}
}

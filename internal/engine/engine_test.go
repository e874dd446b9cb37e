package engine_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/engine"
)

func TestKind(t *testing.T) {
	plain := errors.New("boom")
	for _, c := range []struct {
		name string
		err  error
		want error // nil: returned as it is
	}{
		{"not found", fmt.Errorf("no such container: %w", cerrdefs.ErrNotFound), agentenv.ErrNotFound},
		{"invalid", fmt.Errorf("bad name: %w", cerrdefs.ErrInvalidArgument), agentenv.ErrInvalid},
		{"conflict", fmt.Errorf("name in use: %w", cerrdefs.ErrConflict), agentenv.ErrConflict},
		{"unavailable", fmt.Errorf("daemon busy: %w", cerrdefs.ErrUnavailable), agentenv.ErrUnavailable},
		{"already a kind", fmt.Errorf("gone: %w", agentenv.ErrGone), agentenv.ErrGone},
		{"no kind", plain, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := engine.Kind("unix:///x.sock", c.err)
			if c.want == nil {
				if got != c.err {
					t.Errorf("Kind = %v, want the error as it is", got)
				}
				return
			}
			if !errors.Is(got, c.want) || !errors.Is(got, c.err) {
				t.Errorf("Kind = %v, want %v keeping the original", got, c.want)
			}
		})
	}
	if engine.Kind("h", nil) != nil {
		t.Error("Kind(nil) != nil")
	}
}

func TestIsGone(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("no such container: %w", cerrdefs.ErrNotFound), true},
		{fmt.Errorf("removal of container x is already in progress: %w", cerrdefs.ErrConflict), true},
		{fmt.Errorf("container is running: %w", cerrdefs.ErrConflict), false},
		{errors.New("boom"), false},
	} {
		if got := engine.IsGone(c.err); got != c.want {
			t.Errorf("IsGone(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestFilters(t *testing.T) {
	labels := func(f map[string]map[string]bool) []string { return slices.Sorted(maps.Keys(f["label"])) }
	if got, want := labels(engine.RecordFilter(map[string]string{"a": "1"})), []string{"a=1", agentenv.LabelRecord}; !slices.Equal(got, want) {
		t.Errorf("RecordFilter labels = %v, want %v", got, want)
	}
	if got, want := labels(engine.IDFilter("r1")), []string{agentenv.LabelRecord + "=r1"}; !slices.Equal(got, want) {
		t.Errorf("IDFilter labels = %v, want %v", got, want)
	}
	f, err := engine.LabelFilter(map[string]string{"b": "2", "a": "1"})
	if got, want := labels(f), []string{"a=1", "b=2"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("LabelFilter labels = %v, %v; want %v", got, err, want)
	}
	if _, err := engine.LabelFilter(nil); err == nil {
		t.Error("LabelFilter(nil) did not refuse")
	}
}

// ReadBuildTail ends its error with the last n lines of output, colours dropped, one a line;
// a build with no error message is no error.
func TestReadBuildTail(t *testing.T) {
	var in strings.Builder
	for i := range 30 {
		fmt.Fprintf(&in, `{"stream":"line %d\n"}`+"\n", i)
	}
	in.WriteString(`{"stream":"\u001b[91mred\n\u001b[0m"}` + "\n")
	in.WriteString(`{"errorDetail":{"message":"boom"},"error":"boom"}` + "\n")
	err := engine.ReadBuildTail(strings.NewReader(in.String()), 3)
	if err == nil || err.Error() != "boom; the build's last lines:\n  line 28\n  line 29\n  red" {
		t.Errorf("ReadBuildTail = %q", err)
	}
	if err := engine.ReadBuildTail(strings.NewReader(`{"stream":"ok\n"}`), 3); err != nil {
		t.Errorf("ReadBuildTail of a good build = %v", err)
	}
	if err := engine.ReadBuild(strings.NewReader(in.String())); err == nil || !strings.HasPrefix(err.Error(), "boom (after: ") {
		t.Errorf("ReadBuild = %v, want its old form", err)
	}
}

package task_test

import (
	"errors"
	"os"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// FuzzParse checks that no task file makes Parse panic and that every rejection is an
// ErrInvalid. The committed corpus is in testdata/fuzz/FuzzParse; run it longer with
// go test -run '^$' -fuzz FuzzParse ./task.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"hello.yaml", "../examples/notes-task/task.yaml", "../examples/notes-task/agent-task.yaml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := task.Parse("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, agentenv.ErrInvalid) {
				t.Fatalf("Parse() error %v does not wrap agentenv.ErrInvalid", err)
			}
			return
		}
		if tk.Name == "" || len(tk.Steps) == 0 || tk.Digest == "" {
			t.Fatalf("Parse() accepted a task without name, steps or digest: %+v", tk)
		}
		_ = tk.Placeholders()
	})
}

package eval_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
)

// FuzzEvalFile checks that no eval file makes Parse panic, that a refused one is bad input
// (ErrInvalid: exit 2), and that an accepted one holds what a run needs: a concurrency and,
// for each task, its loaded task and at least one episode. Beside the file is a good task,
// task.yaml, that the seeds name.
func FuzzEvalFile(f *testing.F) {
	f.Add([]byte("name: e\nconcurrency: 2\ntasks:\n  - task: task.yaml\n    k: 3\n"))
	f.Add([]byte("name: e\ntasks:\n  - {task: task.yaml, overrides: {provider: docker, placeholders: {a: b}, model: {input_price: '1.5'}}}\n"))
	f.Add([]byte("name: e\ntasks:\n  - task: nope.yaml\n  - {task: task.yaml, k: 0}\n"))
	f.Add([]byte("tasks: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		good := "name: t\nsteps:\n- {id: a, type: deploy_sandbox, provider: process}\n"
		if err := os.WriteFile(filepath.Join(dir, "task.yaml"), []byte(good), 0o600); err != nil {
			t.Fatal(err)
		}
		ev, err := eval.Parse(filepath.Join(dir, "eval.yaml"), data)
		if err != nil {
			if !errors.Is(err, agentenv.ErrInvalid) {
				t.Errorf("Parse refused a file with %v, which does not wrap ErrInvalid", err)
			}
			return
		}
		if ev.Concurrency < 1 || len(ev.Tasks) == 0 {
			t.Errorf("accepted an eval with concurrency %d and %d tasks", ev.Concurrency, len(ev.Tasks))
		}
		for i, e := range ev.Tasks {
			if e.Task == nil || e.K < 1 {
				t.Errorf("accepted tasks[%d] with task %v and k %d", i, e.Task, e.K)
			}
		}
	})
}

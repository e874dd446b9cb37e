package soak

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentenv/agentenv/spec"
)

// The built-in task is examples/notes-task with its env, examples/notes; task_test.go keeps
// these copies equal to the examples.
var (
	//go:embed notes-task.yaml
	notesTask string
	//go:embed notes-env.yaml
	notesEnv string
)

// WriteTask writes the built-in task into dir, as dir/notes-task/task.yaml beside
// dir/notes/env.yaml, and returns the task folder. A non-empty image replaces agentenv's own
// image (spec.DefaultImage) for the server, db-mcp and the gateway.
func WriteTask(dir, image string) (string, error) {
	env := notesEnv
	if image != "" && image != spec.DefaultImage {
		env = strings.ReplaceAll(env, "image: "+spec.DefaultImage, "image: "+image)
		env = strings.Replace(env, "\n  db_mcp:\n", "\n  db_mcp:\n    image: "+image+"\n", 1)
		env = strings.Replace(env, "\ngateway:\n", "\ngateway:\n  image: "+image+"\n", 1)
	}
	taskDir := filepath.Join(dir, "notes-task")
	for path, body := range map[string]string{
		filepath.Join(taskDir, "task.yaml"):     notesTask,
		filepath.Join(dir, "notes", "env.yaml"): env,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", fmt.Errorf("write task: %w", err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return "", fmt.Errorf("write task: %w", err)
		}
	}
	return taskDir, nil
}

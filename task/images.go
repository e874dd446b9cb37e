package task

import (
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Images returns the images t's deploy_sandbox steps run as named in the file, each once:
// those not built from a Dockerfile and not filled in when the step runs (a placeholder). A
// bundle pushed with its images carries these.
func (t *Task) Images() []string {
	var out []string
	for _, s := range t.Steps {
		if s.Type != TypeDeploySandbox || field(s.fields, "build") != nil {
			continue
		}
		n := field(s.fields, "image")
		if n == nil || n.Kind != yaml.ScalarNode || n.Value == "" || strings.Contains(n.Value, "${") || strings.Contains(n.Value, "<") {
			continue
		}
		if !slices.Contains(out, n.Value) {
			out = append(out, n.Value)
		}
	}
	return out
}

// Builds returns the ids of t's deploy_sandbox steps that build their image from a Dockerfile:
// images a bundle cannot carry, as they are built where the task runs.
func (t *Task) Builds() []string {
	var out []string
	for _, s := range t.Steps {
		if s.Type == TypeDeploySandbox && field(s.fields, "build") != nil {
			out = append(out, s.ID)
		}
	}
	return out
}

package harbor

import (
	"slices"

	"github.com/agentenv/agentenv/task"
)

// LogArtifactsDir is Harbor's convention folder: what the agent or the tests write below it is
// collected after the run, with no artifacts key needed.
const LogArtifactsDir = "/logs/artifacts/"

// artifactBytes bounds the files one artifacts step keeps, summed.
const artifactBytes = 64 << 20

// artifactSteps are the collect_files steps, after the step after, that copy out of the task's
// sandboxes what Harbor collects after a trial: LogArtifactsDir and every artifacts entry (the
// task's, then each [[steps]]'s) from the main container, and the entries naming another
// compose service from that service's sandbox, each path a file or a folder. A path the
// sandbox lacks is skipped (listed in the step's output "missing"), and a step that fails
// (past artifactBytes) leaves the episode's outcome as it is.
func artifactSteps(t *Task, steps []step, after string) []step {
	bySandbox := map[string][]string{sandboxStep: {LogArtifactsDir}}
	order := []string{sandboxStep}
	all := slices.Clone(t.Artifacts)
	for _, st := range t.Steps {
		all = append(all, st.Artifacts...)
	}
	for _, a := range all {
		id := sandboxStep
		if a.Service != "" && a.Service != MainService {
			id = serviceStep(a.Service)
			if !slices.ContainsFunc(steps, func(s step) bool { return s["id"] == id && s["type"] == task.TypeDeploySandbox }) {
				continue // no such service (Load warned), or one that ran to its end
			}
		}
		if _, ok := bySandbox[id]; !ok {
			order = append(order, id)
		}
		if !slices.Contains(bySandbox[id], a.Source) {
			bySandbox[id] = append(bySandbox[id], a.Source)
		}
	}
	var out []step
	for _, id := range order {
		sid := "artifacts"
		if id != sandboxStep {
			sid += "_" + id
		}
		out = append(out, step{"id": sid, "type": task.TypeCollectFiles, "sandbox": id, "paths": bySandbox[id],
			"optional": true, "max_bytes": artifactBytes, "fail_task_on_error": false, "depends_on": []string{after}})
	}
	return out
}

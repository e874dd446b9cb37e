package eval

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"runtime/debug"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/atif"
	"github.com/agentenv/agentenv/task"
)

// atifLines converts each prompt_agent step of episode r in slot k to an ATIF trajectory, in
// step order, redacted as chat-jsonl is. Each is one trajectory per agent, as ATIF has it (an
// agent's name, version and model are the document's, and one episode's steps may prompt
// different agents): session_id is the run id, shared by the episode's trajectories as ATIF
// allows of one run, and trajectory_id is RUN/STEP. The trajectory's extra "episode" says
// which episode and step it is, with the episode's score and outcome.
func atifLines(g Group, k SlotKey, r agentenv.Run, red Redactor, version string) ([]atif.Trajectory, error) {
	ep := episodeOf(r)
	gt := g.Tasks[k.Task]
	system := systemPrompts(gt.File, ep.Seed)
	var seed map[string]string
	if len(ep.Seed) > 0 {
		seed = map[string]string{}
		for name, v := range ep.Seed {
			seed[name] = red.Redact(v)
		}
	}
	var out []atif.Trajectory
	for _, s := range r.Steps {
		p := s.Outputs["trajectory"]
		if s.Type != task.TypePromptAgent || p == "" {
			continue
		}
		lines, err := atif.ReadLines(p)
		if err != nil {
			return nil, err
		}
		for i := range lines {
			lines[i] = red.line(lines[i])
			// An exported trajectory is read away from the run's folder: its images by their
			// path on this machine.
			for j, im := range lines[i].Images {
				lines[i].Images[j].Path = filepath.Join(filepath.Dir(p), filepath.FromSlash(im.Path))
			}
		}
		t, err := atif.FromLines(lines, atif.Info{SessionID: r.ID, TrajectoryID: r.ID + "/" + s.ID,
			AgentVersion: version, System: red.Redact(system[s.ID])})
		if err != nil {
			return nil, err
		}
		if t.Extra == nil {
			t.Extra = map[string]any{}
		}
		t.Extra["episode"] = episodeInfo{Group: g.ID, Run: r.ID, Step: s.ID, Task: gt.Task, TaskFile: gt.File,
			Instance: k.Instance, Attempt: k.Attempt, Seed: seed, Outcome: ep.Outcome, Score: ep.Score}
		out = append(out, t)
	}
	return out, nil
}

// episodeInfo is the extra "episode" of an exported ATIF trajectory.
type episodeInfo struct {
	Group    string            `json:"group"`
	Run      string            `json:"run"`
	Step     string            `json:"step"`
	Task     string            `json:"task"`
	TaskFile string            `json:"task_file"`
	Instance int               `json:"instance"`
	Attempt  int               `json:"attempt"`
	Seed     map[string]string `json:"seed,omitempty"`
	Outcome  task.Outcome      `json:"outcome"`
	Score    *float64          `json:"score"`
}

// line returns l with its text, error, arguments and structured content redacted; JSON stays
// JSON, each string in it redacted.
func (r Redactor) line(l agent.Line) agent.Line {
	l.Text, l.Error = r.Redact(l.Text), r.Redact(l.Error)
	l.Arguments, l.JSON = r.redactJSON(l.Arguments), r.redactJSON(l.JSON)
	return l
}

// redactJSON redacts every string (keys too) of the JSON value raw; raw that is not JSON is
// redacted as text.
func (r Redactor) redactJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return json.RawMessage(r.Redact(string(raw)))
	}
	b, err := json.Marshal(r.walk(v))
	if err != nil {
		return json.RawMessage(r.Redact(string(raw)))
	}
	return b
}

func (r Redactor) walk(v any) any {
	switch x := v.(type) {
	case string:
		return r.Redact(x)
	case []any:
		for i := range x {
			x[i] = r.walk(x[i])
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[r.Redact(k)] = r.walk(e)
		}
		return out
	}
	return v
}

// agentenvVersion is this binary's module version, "devel" for a build from a work tree: the
// version of the agentenv that drove the exported agents.
func agentenvVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

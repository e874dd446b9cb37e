package explorer

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// outcomes lists the outcomes in the order the pages show them: task's, the one word
// `agentenv run`, `runs get` and the exports say too.
func outcomes() []string {
	var out []string
	for _, o := range task.Outcomes() {
		out = append(out, string(o))
	}
	return out
}

// Episode is one run in a listing: what the runs table and the API's lists show.
type Episode struct {
	ID       string            `json:"id"`
	Task     string            `json:"task"`
	Status   string            `json:"status"`
	Outcome  string            `json:"outcome"`
	Score    *float64          `json:"score,omitempty"`
	Episode  int               `json:"episode"` // 1-based within its agentenv run invocation
	Seed     map[string]string `json:"seed,omitempty"`
	Created  time.Time         `json:"created"`
	Ended    time.Time         `json:"ended,omitzero"`
	Duration float64           `json:"duration_s"`     // until ended, or until now while it runs
	Step     string            `json:"step,omitempty"` // the step running now, or the first that failed
	Error    string            `json:"error,omitempty"`
}

func episodeOf(r agentenv.Run, now time.Time) Episode {
	e := Episode{ID: r.ID, Task: r.Task, Status: string(r.Status), Outcome: string(task.OutcomeOf(r)), Score: r.Score, Created: r.Created, Ended: r.Ended, Error: r.Error}
	e.Episode, _ = strconv.Atoi(r.Attrs["episode"])
	for k, v := range r.Attrs {
		if name, ok := strings.CutPrefix(k, "seed."); ok {
			if e.Seed == nil {
				e.Seed = map[string]string{}
			}
			e.Seed[name] = v
		}
	}
	end := r.Ended
	if end.IsZero() {
		end = now
	}
	if !r.Created.IsZero() {
		e.Duration = end.Sub(r.Created).Seconds()
	}
	for _, s := range r.Steps {
		if st := string(s.Status); st == string(agentenv.StepRunning) || (e.Step == "" && st == string(agentenv.StepFailed)) {
			e.Step = s.ID
		}
	}
	return e
}

// instanceKey names the task instance (seeds row) of r.
func instanceKey(r agentenv.Run) string {
	var parts []string
	for k, v := range r.Attrs {
		if strings.HasPrefix(k, "seed.") {
			parts = append(parts, k+"="+v)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

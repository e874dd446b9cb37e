package task

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv/internal/shellquote"
)

// TypeReward is the reward verifier's step type.
const TypeReward = "reward"

// DefaultRewardDir is where a reward verifier's command writes its reward, as Harbor's
// verifiers do.
const DefaultRewardDir = "/logs/verifier"

// reward runs a test command in a sandbox, as Harbor runs a task's tests/test.sh, and scores
// what it wrote: reward.json (named metrics; the score is its "reward" if it has one, else
// the mean of them all) or reward.txt (one number). The folder is emptied as root before the
// command runs, so nothing the agent wrote there counts; the command runs as User with Env
// added, and is killed when the step's timeout is near. A command that writes no reward, one
// that times out, and a reward that is not a number in [0,1] are the verifier's errors
// (infrastructure, retried and left out of the mean), never a 0. Its exit code is kept, not
// scored: the reward file says the score. MinRewards is its gate on named metrics (Harbor's
// min_reward): a metric below its minimum, or one the reward file does not name, closes it.
type reward struct {
	Sandbox string            `yaml:"sandbox" task:"required"` // the deploy_sandbox step
	Command []string          `yaml:"command"`                 // argv; bash /tests/test.sh if empty
	User    string            `yaml:"user"`                    // the user it runs as; the image's if empty
	Env     map[string]string `yaml:"env"`                     // added to its environment
	Dir     string            `yaml:"dir"`                     // the reward's folder; DefaultRewardDir if empty
	// Upload are the verifier's own files (a Harbor task's tests/), put in place in the same
	// command that runs the tests, so that they arrive only once the agent is done.
	Upload []placement `yaml:"upload"`
	// MinRewards gates the steps that depend on this one on the reward file's named metrics
	// ("reward" is reward.txt's number): one below its minimum, or missing, closes the gate and
	// they are skipped, the verifier keeping its score. min_score gates on the score itself.
	MinRewards map[string]float64 `yaml:"min_rewards"`
}

// rewardOutputLimit bounds what a reward verifier keeps of its stdout and of its stderr.
const rewardOutputLimit = 16 << 10

// rewardGrace is what a reward verifier's command is given less than the step's timeout, so
// that it is killed, and its reward read, within the step's own time.
const rewardGrace = 10 * time.Second

func (s *reward) Check() error {
	if err := checkNoHostEnv(s.Env); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if k == "" || strings.ContainsAny(k, "= \t\n") {
			return fmt.Errorf("env: %q is not a variable name", k)
		}
	}
	if s.Dir != "" && (!path.IsAbs(s.Dir) || path.Clean(s.Dir) == "/") {
		return fmt.Errorf("dir: want an absolute path below /, got %q", s.Dir)
	}
	if strings.ContainsAny(s.User, " \t\n'\"") {
		return fmt.Errorf("user: %q is not a user name", s.User)
	}
	if err := checkPlacements("upload", s.Upload); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(s.MinRewards)) {
		if k == "" {
			return errors.New("min_rewards: a metric needs a name")
		}
		if v := s.MinRewards[k]; math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("min_rewards.%s: want a number, got %v", k, v)
		}
	}
	return checkBinding("command", "", s.Command)
}

func (s *reward) Refs() []Ref { return []Ref{{"sandbox", s.Sandbox, sandboxTypes}} }

// argv is the command as run: under coreutils' timeout, with the environment added, as the
// user.
func (s *reward) argv(limit time.Duration) []string {
	cmd := s.Command
	if len(cmd) == 0 {
		cmd = []string{"bash", "/tests/test.sh"}
	}
	argv := []string{"timeout", "-k", "5", strconv.Itoa(max(1, int(limit.Seconds())))}
	if len(s.Env) > 0 {
		argv = append(argv, "env")
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			argv = append(argv, k+"="+s.Env[k])
		}
	}
	if s.User != "" {
		argv = append(argv, "runuser", "-u", s.User, "--")
	}
	return append(argv, cmd...)
}

func (s *reward) Run(ctx context.Context, sc *scope) (Result, error) {
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return Result{}, err
	}
	dir := s.Dir
	if dir == "" {
		dir = DefaultRewardDir
	}
	m := sc.e.r.Manager
	limit := sc.s.Timeout - rewardGrace
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl)-rewardGrace)
	}
	// One exec: the verifier's files put in place and the reward folder emptied as the
	// container's user (root, in Harbor's images), then the tests as the verifier's user, then
	// the reward file printed after a line of its own that the tests cannot know beforehand.
	var place string
	if len(s.Upload) > 0 {
		st, err := stage(ctx, sc, ref.Record, "upload", s.Upload)
		if err != nil {
			return Result{}, err
		}
		place = st.script + ` || { echo "agentenv: cannot put the verifier's files in place" >&2; exit 125; }; `
	}
	mark, err := rewardMark()
	if err != nil {
		return Result{}, err
	}
	q := shellquote.Join([]string{dir})
	script := place + fmt.Sprintf(`rm -rf -- %s && mkdir -p -- %s && chmod 777 -- %s || { echo "agentenv: cannot empty the reward folder" >&2; exit 125; }; `, q, q, q) +
		`"$@"; code=$?; printf '\n%s\n' ` + mark + `; ` +
		fmt.Sprintf(`if [ -f %s/reward.json ]; then echo json; cat %s/reward.json; elif [ -f %s/reward.txt ]; then echo txt; cat %s/reward.txt; else echo none; fi; exit $code`, q, q, q, q)
	res, err := m.Exec(ctx, ref.Record, append([]string{"sh", "-c", script, "sh"}, s.argv(limit)...))
	if err != nil {
		return Result{}, fmt.Errorf("run tests: %w", err)
	}
	stdout, kind, data, marked := splitReward(string(res.Stdout), mark)
	out := Result{Outputs: map[string]string{
		"exit_code": strconv.Itoa(res.ExitCode),
		"stdout":    tailBytes(stdout, rewardOutputLimit),
		"stderr":    tailBytes(string(res.Stderr), rewardOutputLimit),
	}}
	switch {
	case res.ExitCode == 125 && !marked:
		return out, fmt.Errorf("prepare the tests: %s", tail(string(res.Stderr), 300))
	case !marked:
		return out, fmt.Errorf("the verifier's command ended before its reward was read (exit %d): %s", res.ExitCode, tail(string(res.Stderr), 300))
	case res.ExitCode == 124 || res.ExitCode == 137: // coreutils' timeout: TERM, then KILL
		return out, fmt.Errorf("tests timed out after %s (exit %d): %s", limit.Round(time.Second), res.ExitCode, tail(string(res.Stderr), 300))
	}

	metrics, err := parseReward(kind, data, dir)
	if err != nil {
		return out, fmt.Errorf("%w (test exit code %d; stderr: %s)", err, res.ExitCode, tail(string(res.Stderr), 300))
	}
	score, err := rewardScore(metrics)
	if err != nil {
		return out, err
	}
	b, _ := json.Marshal(metrics)
	out.Outputs["rewards"] = string(b)
	out.Score = &score
	for _, k := range slices.Sorted(maps.Keys(metrics)) {
		out.Rows = append(out.Rows, Row{Check: "reward " + k, Expected: "1", Got: strconv.FormatFloat(metrics[k], 'g', -1, 64), Pass: metrics[k] >= 1})
	}
	rb, _ := json.Marshal(out.Rows)
	out.Outputs["rows"], out.Outputs["score"] = string(rb), formatScore(score)
	out.Gate = rewardGate(metrics, s.MinRewards)
	return out, nil
}

// rewardGate is why metrics close a gate of minimums by name, or "" if they pass it: each
// named metric must be there and at least its minimum.
func rewardGate(metrics, mins map[string]float64) string {
	var why []string
	for _, k := range slices.Sorted(maps.Keys(mins)) {
		v, ok := metrics[k]
		switch {
		case !ok:
			why = append(why, fmt.Sprintf("metric %s is not in the reward file (min_rewards.%s %v)", k, k, mins[k]))
		case v < mins[k]:
			why = append(why, fmt.Sprintf("%s %v is below min_rewards.%s %v", k, v, k, mins[k]))
		}
	}
	return strings.Join(why, "; ")
}

// rewardMark is a line the verifier's script prints between the tests' output and the reward
// file: random, so that no test output can pass for it.
func rewardMark() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reward mark: %w", err)
	}
	return "agentenv-reward-" + hex.EncodeToString(b), nil
}

// splitReward splits the verifier's stdout at its last mark line into the tests' own output
// and what follows: which reward file there was ("json", "txt" or "none") and its content.
// marked is false if the mark is not there (the script did not get that far).
func splitReward(stdout, mark string) (tests, kind, data string, marked bool) {
	i := strings.LastIndex(stdout, "\n"+mark+"\n")
	if i < 0 {
		return stdout, "", "", false
	}
	tests, rest := stdout[:i], stdout[i+len(mark)+2:]
	kind, data, _ = strings.Cut(rest, "\n")
	return tests, kind, data, true
}

// parseReward reads a reward file of the kind splitReward found in dir as named metrics:
// reward.json's numbers (and booleans), or reward.txt's one number as "reward".
func parseReward(kind, data, dir string) (map[string]float64, error) {
	switch kind {
	case "json":
		var raw map[string]any
		if err := json.Unmarshal([]byte(data), &raw); err != nil {
			return nil, fmt.Errorf("reward.json: want a JSON object of numbers: %v", err)
		}
		metrics := map[string]float64{}
		for k, v := range raw {
			f, ok := v.(float64)
			if !ok {
				if b, isBool := v.(bool); isBool {
					f, ok = map[bool]float64{true: 1, false: 0}[b], true
				}
			}
			if !ok {
				return nil, fmt.Errorf("reward.json: %s: want a number, got %s", k, jsonText(v))
			}
			metrics[k] = f
		}
		if len(metrics) == 0 {
			return nil, errors.New("reward.json: holds no metric")
		}
		return metrics, nil
	case "txt":
		f, err := strconv.ParseFloat(strings.TrimSpace(data), 64)
		if err != nil {
			return nil, fmt.Errorf("reward.txt: want a number, got %q", tail(data, 60))
		}
		return map[string]float64{"reward": f}, nil
	}
	return nil, fmt.Errorf("the tests wrote no reward (%s/reward.txt or reward.json)", dir)
}

// rewardScore is the score of named metrics: "reward" if there is one, else their mean. A
// score outside [0,1] is an error: agentenv's scores are fractions.
func rewardScore(metrics map[string]float64) (float64, error) {
	score, ok := metrics["reward"]
	if !ok {
		for _, v := range metrics {
			score += v
		}
		score /= float64(len(metrics))
	}
	if !(score >= 0 && score <= 1) {
		return 0, fmt.Errorf("reward %v: want a number in [0,1]", score)
	}
	return score, nil
}

// jsonText is v as JSON, for messages.
func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return tail(string(b), 60)
}

package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv/agent/atif"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent/model"
)

// TypeJudge is the judge verifier's step type.
const TypeJudge = "judge"

// Judge settings: the [model.judge] table of the config.
const (
	keyJudgeURL  = "model.judge.base_url"
	keyJudgeName = "model.judge.name"
	keyJudgeKey  = "model.judge.api_key"
)

// errJudgeAnswer marks a judge's answer that gives no score: a refusal, an empty or malformed
// answer, a score outside [0,1]. It is the infrastructure's error, never a 0.
var errJudgeAnswer = errors.New("judge gave no score")

// judgeSystem is the judge's instructions.
const judgeSystem = `You grade an AI agent's work against a rubric. Read the rubric and the inputs, then answer with one JSON object and nothing else:
{"score": <a number from 0 to 1, 1 meaning the rubric is fully met>, "reasons": "<why, in one or two sentences>"}`

// judge grades inputs against a rubric with the model of [model.judge].
type judge struct {
	Rubric     string            `yaml:"rubric"`
	RubricFile string            `yaml:"rubric_file"` // or a file of the task's folder
	Inputs     map[string]string `yaml:"inputs"`      // name → text, usually ${steps.ID.outputs.NAME}
	// Screenshot names a prompt_agent step: the last image its trajectory kept (a browser's
	// screenshot) is given to the judge with the rubric.
	Screenshot string `yaml:"screenshot"`
}

func (s *judge) Check() error {
	if (s.Rubric == "") == (s.RubricFile == "") {
		return errors.New("set rubric or rubric_file, one of them")
	}
	return nil
}

func (s *judge) Refs() []Ref {
	if s.Screenshot == "" {
		return nil
	}
	return []Ref{{"screenshot", s.Screenshot, []string{TypePromptAgent}}}
}

// lastImage is the last image the trajectory of prompt_agent step id kept, and its file.
func lastImage(sc *scope, id string) (model.Image, string, error) {
	path, err := sc.e.lookup(id, "trajectory")
	if err != nil {
		return model.Image{}, "", err
	}
	lines, err := atif.ReadLines(path)
	if err != nil {
		return model.Image{}, "", err
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if n := len(lines[i].Images); n > 0 {
			im := lines[i].Images[n-1]
			if !filepath.IsLocal(filepath.FromSlash(im.Path)) {
				return model.Image{}, "", fmt.Errorf("image %q is not beside the trajectory", im.Path)
			}
			file := filepath.Join(filepath.Dir(path), filepath.FromSlash(im.Path))
			data, err := os.ReadFile(file)
			if err != nil {
				return model.Image{}, "", err
			}
			return model.Image{MediaType: im.MediaType, Data: data}, file, nil
		}
	}
	return model.Image{}, "", fmt.Errorf("step %s's agent kept no image", id)
}

func (s *judge) Run(ctx context.Context, sc *scope) (Result, error) {
	cfg, err := judgeConfig(sc.e.r)
	if err != nil {
		return Result{}, err
	}
	sc.secret(cfg.APIKey)
	cfg.HTTP = sc.e.r.httpClient()
	rubric := s.Rubric
	if s.RubricFile != "" {
		p, err := sc.within("rubric_file", s.RubricFile)
		if err != nil {
			return Result{}, err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return Result{}, fmt.Errorf("rubric_file: %w", err)
		}
		rubric = string(b)
	}
	prompt := judgePrompt(rubric, s.Inputs)
	out := map[string]string{"prompt": prompt}
	var images []model.Image
	if s.Screenshot != "" {
		im, file, err := lastImage(sc, s.Screenshot)
		if err != nil {
			return Result{Outputs: out}, fmt.Errorf("screenshot: %w", err)
		}
		images, out["screenshot"] = append(images, im), file
	}
	c, err := model.Complete(ctx, cfg, judgeSystem, prompt, images...)
	if err != nil {
		return Result{Outputs: out}, fmt.Errorf("judge model: %w", err)
	}
	out["answer"], out["model"] = c.Text, c.Model
	out["input_tokens"], out["output_tokens"] = strconv.FormatInt(c.InputTokens, 10), strconv.FormatInt(c.OutputTokens, 10)
	if c.Refusal != "" {
		out["answer"] = c.Refusal
		return Result{Outputs: out}, fmt.Errorf("%w: the model refused: %s", errJudgeAnswer, clip(c.Refusal))
	}
	score, reasons, err := parseJudgment(c.Text)
	if err != nil {
		return Result{Outputs: out}, err
	}
	out["reasons"] = reasons
	res := verdict([]Row{{Check: "judge: rubric", Expected: "1", Got: formatScore(score) + ": " + clip(reasons), Pass: score >= 1}})
	res.Score = &score
	res.Outputs["score"] = formatScore(score)
	for k, v := range out {
		res.Outputs[k] = v
	}
	return res, nil
}

// judgePrompt is the user message: the rubric, then each input by name, in name order.
func judgePrompt(rubric string, inputs map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Rubric:\n%s\n", strings.TrimSpace(rubric))
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\n<%s>\n%s\n</%s>\n", n, inputs[n], n)
	}
	return b.String()
}

// codeBlock finds a fenced block, with or without a language.
var codeBlock = regexp.MustCompile("(?s)```[A-Za-z]*\\s*\\n?(.*?)```")

// parseJudgment reads a judge's answer: a JSON object {"score": x, "reasons": ...} in a code
// block or bare (also with text around it), or a bare number. The score must be in [0,1].
// Anything else wraps errJudgeAnswer.
func parseJudgment(text string) (float64, string, error) {
	t := strings.TrimSpace(text)
	if t == "" {
		return 0, "", fmt.Errorf("%w: empty answer", errJudgeAnswer)
	}
	var candidates []string
	if m := codeBlock.FindStringSubmatch(t); m != nil {
		candidates = append(candidates, strings.TrimSpace(m[1]))
	}
	candidates = append(candidates, t)
	if i, j := strings.Index(t, "{"), strings.LastIndex(t, "}"); i >= 0 && j > i {
		candidates = append(candidates, t[i:j+1])
	}
	for _, c := range candidates {
		if f, err := strconv.ParseFloat(c, 64); err == nil {
			return checkScore(f, "")
		}
		var v struct {
			Score   *float64        `json:"score"`
			Reasons json.RawMessage `json:"reasons"`
			Reason  string          `json:"reason"`
		}
		if json.Unmarshal([]byte(c), &v) != nil {
			continue
		}
		if v.Score == nil {
			return 0, "", fmt.Errorf("%w: the JSON answer has no number score: %s", errJudgeAnswer, clip(t))
		}
		return checkScore(*v.Score, reasonsText(v.Reasons, v.Reason))
	}
	return 0, "", fmt.Errorf("%w: want {\"score\": 0..1, \"reasons\": ...} or a number, got %s", errJudgeAnswer, clip(t))
}

func checkScore(f float64, reasons string) (float64, string, error) {
	if math.IsNaN(f) || f < 0 || f > 1 {
		return 0, "", fmt.Errorf("%w: score %v is not in [0,1]", errJudgeAnswer, f)
	}
	return f, reasons, nil
}

// reasonsText is the reasons as text: a string as it is, a list of strings joined by "; ".
func reasonsText(raw json.RawMessage, reason string) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return strings.Join(list, "; ")
	}
	if len(raw) > 0 {
		return string(raw)
	}
	return reason
}

// judgeConfig reads [model.judge]: base_url and name are required, api_key optional.
func judgeConfig(r *Runner) (model.Config, error) {
	if r.Model == nil {
		return model.Config{}, fmt.Errorf("no [model.judge] settings configured")
	}
	cfg := model.Config{Provider: model.OpenAI}
	for _, k := range []struct {
		key      string
		to       *string
		required bool
	}{{keyJudgeURL, &cfg.BaseURL, true}, {keyJudgeName, &cfg.Model, true}, {keyJudgeKey, &cfg.APIKey, false}} {
		v, err := r.Model.Get(k.key)
		if err != nil {
			return model.Config{}, fmt.Errorf("%s: %w", k.key, err)
		}
		if v == "" && k.required {
			return model.Config{}, fmt.Errorf("%s is not set: give [model.judge] base_url and name in the config, or AGENTENV_MODEL_JUDGE_BASE_URL and AGENTENV_MODEL_JUDGE_NAME", k.key)
		}
		*k.to = v
	}
	return cfg, nil
}

// preflightJudges refuses, before anything is deployed, a task with a judge step when
// [model.judge] is not configured.
func (r *Runner) preflightJudges(t *Task) error {
	var errs []error
	for _, s := range t.Steps {
		if s.Type != TypeJudge {
			continue
		}
		if _, err := judgeConfig(r); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: step %s: judge: %w: %w", t.File, s.Line, s.ID, err, agentenv.ErrInvalid))
		}
	}
	return errors.Join(errs...)
}

package task

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/suggest"
	"github.com/agentenv/agentenv/internal/yamlfile"
)

// ScoreMode says how the scores of a task's verifiers (or an aggregate's) combine into one.
type ScoreMode string

// Score modes.
const (
	AllPass         ScoreMode = "all_pass"         // 1 if every score is 1, else 0
	AnyPass         ScoreMode = "any_pass"         // 1 if any score is 1, else 0
	WeightedAverage ScoreMode = "weighted_average" // sum of weight*score over sum of weights
	Min             ScoreMode = "min"              // the lowest score
)

func (m ScoreMode) valid() bool {
	return m == AllPass || m == AnyPass || m == WeightedAverage || m == Min
}

// Task is a parsed and validated task file: a DAG of typed steps and how their scores combine.
type Task struct {
	Name        string
	Description string
	// Score is Min if the file names none: for verifiers that pass or fail it is all_pass, and
	// a graded verifier's grade (a judge's 0.75) is kept rather than turned into 0.
	Score  ScoreMode
	Steps  []*StepSpec
	File   string // the path (or name) it was parsed from
	Dir    string // base of the relative paths in it
	Digest string // "sha256:" and the hex digest of the file's bytes
	// InfraRetries is how many times an episode that ended on an infrastructure error is run
	// again from scratch (retries: {infra: N}); 0 if the file names none.
	InfraRetries int

	kinds        map[string]kind
	placeholders []string                   // every <name> used, sorted by first use
	anc          map[string]map[string]bool // each step's transitive dependencies
}

// StepSpec is one step as declared. Its type-specific fields are kept as parsed and decoded
// afresh into the type's Step each time it runs, after substitution.
type StepSpec struct {
	ID              string
	Type            string
	DependsOn       []string      // as resolved: all earlier steps when the file has none
	FailTaskOnError bool          // true unless the file says false
	Timeout         time.Duration // the type's default if the file has none
	// Weight is a verifier's weight in the task's score: 1 by default; 0 runs and records the
	// verifier (its score, its gate) but leaves it out of the task's score in every mode.
	Weight float64
	// MinScore is a verifier's gate (min_score): when it scores below it, the verifier ends
	// passed with that score and the steps that depend on it are skipped; nil gates nothing.
	MinScore *float64
	Line     int        // where the step starts in the file
	Retry    *StepRetry // re-run a span when this step fails on an infrastructure error; nil if none

	fields *yaml.Node // the type-specific fields, a mapping
	path   string     // "steps[2]", for messages
	broken bool       // its own fields gave errors: validate checks only what refers to it
}

// StepRetry is a step's retry: {max: N, from: STEP_ID}. When the step fails with an
// infrastructure error, the span of From and every step depending on it (this one included)
// is torn down and run again, up to Max times. From is the step itself if the file names none.
type StepRetry struct {
	Max  int
	From string
	line int
}

// commonFields are the fields every step has.
var commonFields = []string{"id", "type", "depends_on", "fail_task_on_error", "timeout", "retry"}

// verifierFields are the fields every verifier has besides commonFields.
var verifierFields = []string{"weight", "min_score"}

// The task file of `agentenv run hello`.
//
//go:embed hello.yaml
var helloYAML []byte

// Schema is the JSON Schema (draft 2020-12) of task files, as published for editors and CI.
// Load also checks what a schema cannot (the DAG, references, placeholders). Callers must not
// modify it.
//
//go:embed task.schema.json
var Schema []byte

// Hello returns the built-in hello task: a process sandbox, two files, a file check and a
// command check. It needs no Docker, no model and no config.
func Hello() *Task {
	t, err := Parse("hello", helloYAML)
	if err != nil {
		panic(fmt.Sprintf("built-in hello task: %v", err)) // a test keeps this from happening
	}
	t.Dir = ""
	return t
}

// Loader loads task files with the checks that need more than the file: with them, what they
// find is reported in the same answer as the file's own errors.
type Loader struct {
	// Provider, if not nil, checks the provider (or comma chain) a step names, as the runner
	// will resolve it; a name with a placeholder is checked per instance instead.
	Provider func(chain string) error
}

// Load reads and validates the task file at path (YAML or JSON).
func Load(path string) (*Task, error) { return Loader{}.Load(path) }

// LoadPath loads a task file, or the task.yaml (or task.json) of a folder.
func LoadPath(path string) (*Task, error) { return Loader{}.LoadPath(path) }

// Load reads and validates the task file at path (YAML or JSON).
func (l Loader) Load(path string) (*Task, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load task: %w: %w", err, agentenv.ErrInvalid)
	}
	return l.Parse(path, data)
}

// LoadPath loads a task file, or the task.yaml (or task.json) of a folder.
func (l Loader) LoadPath(path string) (*Task, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load task: %w: %w", err, agentenv.ErrInvalid)
	}
	if !fi.IsDir() {
		return l.Load(path)
	}
	for _, name := range []string{"task.yaml", "task.yml", "task.json"} {
		p := filepath.Join(path, name)
		if _, err := os.Stat(p); err == nil {
			return l.Load(p)
		}
	}
	return nil, fmt.Errorf("load task: %s has no task.yaml or task.json: %w: %w", path, os.ErrNotExist, agentenv.ErrInvalid)
}

// Parse decodes and validates data as a task file named name (used in errors, and its folder
// as the base of relative paths). Decoding is strict and every problem is reported at once,
// each an [*Error] naming the file, line and field.
func Parse(name string, data []byte) (*Task, error) { return Loader{}.Parse(name, data) }

// Parse is [Parse] with l's checks.
func (l Loader) Parse(name string, data []byte) (*Task, error) {
	return l.parse(name, data, builtinKinds())
}

func (l Loader) parse(name string, data []byte, kinds map[string]kind) (*Task, error) {
	root, err := yamlfile.Parse(name, "task file", data)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	t := &Task{File: name, Dir: filepath.Dir(name), Digest: "sha256:" + hex.EncodeToString(sum[:]), Score: Min, kinds: kinds}
	d := newDecoder(name)
	t.decode(d, root)
	t.validate(d)
	if l.Provider != nil {
		t.checkProviders(d, l.Provider)
	}
	if len(d.Errs) > 0 {
		return nil, errors.Join(d.Errs...)
	}
	return t, nil
}

// decode reads the top level and each step's common fields.
func (t *Task) decode(d *decoder, root *yaml.Node) {
	known := []string{"name", "description", "score", "retries", "steps"}
	pairs, ok := d.Pairs(root, "", "field")
	if !ok {
		return
	}
	var steps *yaml.Node
	for _, kv := range pairs {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "name":
			t.Name = d.Str(v, "name")
		case "description":
			t.Description = d.Str(v, "description")
		case "score":
			t.Score = ScoreMode(d.Str(v, "score"))
			if !t.Score.valid() {
				d.Errorf(v.Line, "score", "want all_pass, any_pass, weighted_average or min, got %q%s", t.Score,
					suggest.DidYouMean(string(t.Score), []string{"all_pass", "any_pass", "weighted_average", "min"}))
			}
		case "steps":
			steps = v
		case "retries":
			d.Fields(v, "retries", []string{"infra"}, func(key string, v *yaml.Node, p string) {
				if t.InfraRetries = d.Integer(v, p); t.InfraRetries < 0 {
					d.Errorf(v.Line, p, "want 0 or more, got %d", t.InfraRetries)
				}
			})
		default:
			d.Unknown(k, "", known)
		}
	}
	if t.Name == "" {
		t.Name = strings.TrimSuffix(filepath.Base(t.File), filepath.Ext(t.File))
	}
	if steps == nil || yamlfile.IsNull(steps) {
		d.Errorf(root.Line, "steps", "missing field: a task needs at least one step")
		return
	}
	if steps = d.Resolve(steps, "steps"); steps == nil || steps.Kind != yaml.SequenceNode {
		d.Errorf(root.Line, "steps", "want a list of steps")
		return
	}
	if len(steps.Content) == 0 {
		d.Errorf(steps.Line, "steps", "empty: a task needs at least one step")
		return
	}
	for i, n := range steps.Content {
		before := len(d.Errs)
		if s := t.decodeStep(d, n, yamlfile.Index("steps", i)); s != nil {
			s.broken = s.broken || len(d.Errs) > before
			t.Steps = append(t.Steps, s)
		}
	}
}

// decodeStep reads one step's common fields and checks its type-specific ones. A step of no
// known type is returned broken, so that the steps naming it are not blamed as well; nil is a
// step that is not a mapping.
func (t *Task) decodeStep(d *decoder, n *yaml.Node, path string) *StepSpec {
	s := &StepSpec{Line: n.Line, path: path, FailTaskOnError: true, Weight: 1}
	pairs, ok := d.Pairs(n, path, "field")
	if !ok {
		return nil
	}
	s.fields = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line, Column: n.Column}
	var deps *yaml.Node
	var weight, minScore *yaml.Node
	for _, kv := range pairs {
		k, v := kv[0], kv[1]
		p := yamlfile.Join(path, k.Value)
		switch k.Value {
		case "id":
			s.ID = d.Str(v, p)
		case "type":
			s.Type = d.Str(v, p)
		case "depends_on":
			deps = v
		case "fail_task_on_error":
			if err := v.Decode(&s.FailTaskOnError); err != nil {
				d.Errorf(v.Line, p, "want true or false, got %s", yamlfile.Describe(v))
			}
		case "timeout":
			s.Timeout = d.DurationText(v, p)
		case "retry":
			s.Retry = &StepRetry{Max: 1, line: v.Line}
			d.Fields(v, p, []string{"max", "from"}, func(key string, v *yaml.Node, fp string) {
				switch key {
				case "max":
					if s.Retry.Max = d.Integer(v, fp); s.Retry.Max < 1 {
						d.Errorf(v.Line, fp, "want 1 or more, got %d", s.Retry.Max)
					}
				case "from":
					s.Retry.From = d.Str(v, fp)
				}
			})
		case "weight":
			weight = v
			if err := v.Decode(&s.Weight); err != nil || !(s.Weight >= 0) || math.IsInf(s.Weight, 1) {
				d.Errorf(v.Line, p, "want 0 or a positive number, got %s", scalarText(v))
			}
		case "min_score":
			minScore = v
			var m float64
			if err := v.Decode(&m); err != nil || !(m >= 0 && m <= 1) {
				d.Errorf(v.Line, p, "want a number in [0,1], got %s", scalarText(v))
			} else {
				s.MinScore = &m
			}
		default:
			s.fields.Content = append(s.fields.Content, k, v)
		}
	}
	if s.ID == "" {
		d.Errorf(n.Line, yamlfile.Join(path, "id"), "missing field")
	}
	if deps != nil {
		s.DependsOn = d.Strings(deps, yamlfile.Join(path, "depends_on"))
		if s.DependsOn == nil {
			s.DependsOn = []string{} // depends_on: null is no dependency, like []
		}
	}
	if s.Type == "" {
		d.Errorf(n.Line, yamlfile.Join(path, "type"), "missing field")
		s.broken = true
		return s
	}
	k, ok := t.kinds[s.Type]
	if !ok {
		d.Errorf(n.Line, yamlfile.Join(path, "type"), "unknown step type %q%s", s.Type, suggest.DidYouMean(s.Type, t.kindNames()))
		s.broken = true
		return s
	}
	if weight != nil && !k.verifier {
		d.Errorf(weight.Line, yamlfile.Join(path, "weight"), "only verifiers have a weight")
	}
	if minScore != nil && !k.verifier {
		d.Errorf(minScore.Line, yamlfile.Join(path, "min_score"), "only verifiers have a gate (min_score)")
	}
	extra := commonFields
	if k.verifier {
		extra = append(append([]string(nil), commonFields...), verifierFields...)
	}
	if s.Timeout == 0 {
		s.Timeout = k.timeout
	}
	typ := reflect.TypeOf(k.new())
	d.check(s.fields, typ, path, extra)
	return s
}

// scalarText is a scalar as the file wrote it, else what v is, for messages.
func scalarText(v *yaml.Node) string {
	if v.Kind == yaml.ScalarNode && v.Tag != "!!str" {
		return v.Value
	}
	return yamlfile.Describe(v)
}

func (t *Task) kindNames() []string {
	out := make([]string, 0, len(t.kinds))
	for name := range t.kinds {
		out = append(out, name)
	}
	return out
}

// step returns the step with id, or nil.
func (t *Task) step(id string) *StepSpec {
	for _, s := range t.Steps {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// Placeholders returns the <name> placeholders the task uses, in order of first use; each
// needs a column of that name in the seeds file.
func (t *Task) Placeholders() []string { return append([]string(nil), t.placeholders...) }

// Verifiers returns the ids of the verifier steps whose scores make up the task's score: every
// verifier that no aggregate step consumes.
func (t *Task) Verifiers() []string {
	used := map[string]bool{}
	for _, s := range t.Steps {
		if s.Type == TypeAggregate {
			if a, err := t.decodeFields(s, s.fields); err == nil {
				for _, id := range a.(*aggregate).Verifiers {
					used[id] = true
				}
			}
		}
	}
	var out []string
	for _, s := range t.Steps {
		if t.kinds[s.Type].verifier && !used[s.ID] {
			out = append(out, s.ID)
		}
	}
	return out
}

// decodeFields decodes fields (s's own, or a substituted copy) into a fresh Step of s's type
// and checks it.
func (t *Task) decodeFields(s *StepSpec, fields *yaml.Node) (Step, error) {
	st := t.kinds[s.Type].new()
	d := newDecoder(t.File)
	if err := fields.Decode(st); err != nil {
		d.YAMLError(s.path, err)
		return nil, errors.Join(d.Errs...)
	}
	if err := st.Check(); err != nil {
		return nil, &Error{File: t.File, Line: s.Line, Path: s.path + " (" + s.ID + ")", Msg: err.Error()}
	}
	return st, nil
}

package task

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/jackc/pgx/v5"

	"github.com/agentenv/agentenv/internal/cleanup"
)

// closeTimeout bounds the close of the service DB connection of an sql verifier.
const closeTimeout = 5 * time.Second

// responseMatches checks an output of an earlier step, by default an agent's response.
type responseMatches struct {
	Step     string  `yaml:"step" task:"required"` // the step whose output is checked
	Output   string  `yaml:"output"`               // "response" if empty
	Contains string  `yaml:"contains"`
	Regex    string  `yaml:"regex"`
	Equals   *string `yaml:"equals"`
}

func (s *responseMatches) Check() error {
	if s.Contains == "" && s.Regex == "" && s.Equals == nil {
		return errors.New("set contains, regex or equals")
	}
	return checkRegex("regex", s.Regex)
}

func (s *responseMatches) Refs() []Ref { return []Ref{{"step", s.Step, nil}} }

func (s *responseMatches) Run(ctx context.Context, sc *scope) (Result, error) {
	name := s.Output
	if name == "" {
		name = "response"
	}
	got, err := sc.e.lookup(s.Step, name)
	if err != nil {
		return Result{}, err
	}
	return verdict(match(s.Step+"."+name, got, matcher{Contains: s.Contains, Regex: s.Regex, Equals: s.Equals})), nil
}

// aggregate combines the scores of named verifiers into one.
type aggregate struct {
	Verifiers []string           `yaml:"verifiers" task:"required"`
	Mode      ScoreMode          `yaml:"mode"`    // min if empty (all_pass for pass/fail verifiers)
	Weights   map[string]float64 `yaml:"weights"` // for weighted_average; 1 for a verifier not named
}

func (s *aggregate) Check() error {
	if len(s.Verifiers) == 0 {
		return errors.New("verifiers: name at least one verifier step")
	}
	if s.Mode != "" && !s.Mode.valid() {
		return fmt.Errorf("mode: want all_pass, any_pass, weighted_average or min, got %q", s.Mode)
	}
	for id, w := range s.Weights {
		if w <= 0 {
			return fmt.Errorf("weights.%s: want a positive number", id)
		}
		found := false
		for _, v := range s.Verifiers {
			found = found || v == id
		}
		if !found {
			return fmt.Errorf("weights.%s: not one of the verifiers", id)
		}
	}
	return nil
}

func (s *aggregate) Refs() []Ref {
	var out []Ref
	for i, id := range s.Verifiers {
		out = append(out, Ref{fmt.Sprintf("verifiers[%d]", i), id, verifierTypes})
	}
	return out
}

// verifierTypes are the step types that write a score.
var verifierTypes = []string{TypeFileContains, TypeCommandSucceeds, TypeResponseMatches, TypeToolResult, TypeSQL, TypeDataGet, TypeAggregate, TypeJudge, TypeScript}

func (s *aggregate) Run(ctx context.Context, sc *scope) (Result, error) {
	mode := s.Mode
	if mode == "" {
		mode = Min
	}
	scores := make([]float64, len(s.Verifiers))
	weights := make([]float64, len(s.Verifiers))
	var rows []Row
	for i, id := range s.Verifiers {
		st := sc.state(id)
		weights[i] = 1
		if w, ok := s.Weights[id]; ok {
			weights[i] = w
		}
		got := string(st.rec.Status)
		if st.rec.Score != nil && st.rec.Status == agentenv.StepPassed {
			scores[i] = *st.rec.Score
			got = formatScore(scores[i])
		} else if st.rec.Error != "" {
			got += ": " + st.rec.Error
		}
		rows = append(rows, Row{Check: "score of " + id, Expected: "1", Got: got, Pass: scores[i] >= 1})
	}
	res := verdict(rows)
	score := combine(mode, scores, weights)
	res.Score = &score
	res.Outputs["score"] = formatScore(score)
	return res, nil
}

// sqlCheck runs a query against a deployed env's service DB and checks the rows. It connects
// with the env's DatabaseURL, the deployment's read-only verifier role: the query can read
// every schema and change nothing, whatever it says. Placeholders and output references in
// the query arrive here already bound: the query holds $N and Args their values (bind.go).
type sqlCheck struct {
	Env    string    `yaml:"env" task:"required"`
	Query  string    `yaml:"query" task:"required"`
	Args   []any     `yaml:"args"`
	Expect sqlExpect `yaml:"expect" task:"required"`
}

// sqlExpect is what a query must return; every field set is a row. Cells compare as text.
type sqlExpect struct {
	Count *int       `yaml:"count"` // number of rows
	Rows  [][]string `yaml:"rows"`  // exactly these rows, in order
	Value *string    `yaml:"value"` // the first column of the first row
}

func (s *sqlCheck) Check() error {
	if s.Expect.Count == nil && s.Expect.Rows == nil && s.Expect.Value == nil {
		return errors.New("expect: set count, rows or value")
	}
	return checkBinding("query", s.Query, nil)
}

func (s *sqlCheck) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

func (s *sqlCheck) Run(ctx context.Context, sc *scope) (Result, error) {
	env, err := sc.env(s.Env)
	if err != nil {
		return Result{}, err
	}
	if env.DatabaseURL == "" {
		return Result{}, fmt.Errorf("env of step %s has no service DB", s.Env)
	}
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		return Result{}, fmt.Errorf("connect to service DB: %w", err)
	}
	defer cleanup.Do(ctx, closeTimeout, conn.Close) //nolint:errcheck // the query said what matters
	rows, err := conn.Query(ctx, s.Query, s.Args...)
	if err != nil {
		return Result{}, fmt.Errorf("query: %w", err)
	}
	var got [][]string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			rows.Close()
			return Result{}, fmt.Errorf("query: %w", err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = cell(v)
		}
		got = append(got, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Result{}, fmt.Errorf("query: %w", err)
	}
	return verdict(sqlRows(s.Expect, got)), nil
}

// sqlRows compares query rows with x.
func sqlRows(x sqlExpect, got [][]string) []Row {
	var rows []Row
	if x.Count != nil {
		rows = append(rows, Row{Check: "number of rows", Expected: strconv.Itoa(*x.Count), Got: strconv.Itoa(len(got)), Pass: len(got) == *x.Count})
	}
	if x.Rows != nil {
		want, have := marshal(x.Rows), marshal(got)
		if got == nil {
			have = "[]"
		}
		rows = append(rows, Row{Check: "rows", Expected: want, Got: clip(have), Pass: want == have || (len(x.Rows) == 0 && len(got) == 0)})
	}
	if x.Value != nil {
		v := "(no rows)"
		if len(got) > 0 && len(got[0]) > 0 {
			v = got[0][0]
		}
		rows = append(rows, Row{Check: "value", Expected: *x.Value, Got: v, Pass: len(got) > 0 && v == *x.Value})
	}
	return rows
}

// cell formats a value pgx decoded as text, the way psql would print it.
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return x
	case []byte:
		return string(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = cell(e)
		}
		return "{" + strings.Join(parts, ",") + "}"
	default:
		return fmt.Sprint(x)
	}
}

package task

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// TypeGatewayTrajectory is the verifier of a gateway's trajectory.
const TypeGatewayTrajectory = "gateway_trajectory"

// gatewayTrajectory grades what reached the env: the gateway's /trajectory (every tool call
// with its role and result, every trigger's call and every control change), one row per
// expected record.
type gatewayTrajectory struct {
	Env     string      `yaml:"env" task:"required"`
	Expect  []trajMatch `yaml:"expect" task:"required"`
	InOrder bool        `yaml:"in_order"` // each expected record comes after the previous one's first match
}

// trajMatch describes records of the trajectory; every field set must hold.
type trajMatch struct {
	Via         string `yaml:"via"` // mcp, step, trigger or control
	Role        string `yaml:"role"`
	Tool        string `yaml:"tool"`     // the gateway's tool name, or a control route such as tools/disable
	Contains    string `yaml:"contains"` // in the record's arguments or result, as JSON text
	IsError     *bool  `yaml:"is_error"` // the call failed or its result is a tool error
	VirtualTime string `yaml:"virtual_time"`
	Count       *int   `yaml:"count"` // exactly this many such records; at least one if unset
}

func (s *gatewayTrajectory) Check() error {
	if len(s.Expect) == 0 {
		return errors.New("expect: want at least one record")
	}
	for i, m := range s.Expect {
		if m == (trajMatch{}) {
			return fmt.Errorf("expect[%d]: set via, role, tool, contains, is_error, virtual_time or count", i)
		}
		if m.Count != nil && *m.Count < 0 {
			return fmt.Errorf("expect[%d].count: want 0 or more", i)
		}
		if s.InOrder && m.Count != nil {
			return fmt.Errorf("expect[%d].count: not with in_order", i)
		}
	}
	return nil
}

func (s *gatewayTrajectory) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

// trajRecord is one line of a gateway trajectory, as this verifier reads it.
type trajRecord struct {
	ID          int64           `json:"id"`
	Via         string          `json:"via"`
	Role        string          `json:"role"`
	Tool        string          `json:"tool"`
	Arguments   json.RawMessage `json:"arguments"`
	Result      json.RawMessage `json:"result"`
	Error       string          `json:"error"`
	VirtualTime string          `json:"virtual_time"`
}

func (m trajMatch) holds(r trajRecord) bool {
	switch {
	case m.Via != "" && r.Via != m.Via, m.Role != "" && r.Role != m.Role, m.Tool != "" && r.Tool != m.Tool,
		m.VirtualTime != "" && r.VirtualTime != m.VirtualTime:
		return false
	case m.Contains != "" && !strings.Contains(string(r.Arguments), m.Contains) && !strings.Contains(string(r.Result), m.Contains) && !strings.Contains(r.Error, m.Contains):
		return false
	}
	if m.IsError != nil {
		var res struct {
			IsError bool `json:"isError"`
		}
		_ = json.Unmarshal(r.Result, &res)
		if (r.Error != "" || res.IsError) != *m.IsError {
			return false
		}
	}
	return true
}

func (m trajMatch) String() string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("via", m.Via)
	add("role", m.Role)
	add("tool", m.Tool)
	if m.Contains != "" {
		add("contains", strconv.Quote(m.Contains))
	}
	if m.IsError != nil {
		add("is_error", strconv.FormatBool(*m.IsError))
	}
	add("virtual_time", m.VirtualTime)
	return "a record " + strings.Join(parts, " ")
}

func (s *gatewayTrajectory) Run(ctx context.Context, sc *scope) (Result, error) {
	env, err := sc.env(s.Env)
	if err != nil {
		return Result{}, err
	}
	code, b, err := sc.admin(ctx, env, http.MethodGet, "/trajectory", nil, nil)
	if err != nil {
		return Result{}, err
	}
	if code != http.StatusOK {
		return Result{}, fmt.Errorf("GET /trajectory: gateway answered %d: %s", code, tail(string(b), 300))
	}
	var recs []trajRecord
	sca := bufio.NewScanner(bytes.NewReader(b))
	sca.Buffer(make([]byte, 0, 64<<10), maxAdminAnswer)
	for sca.Scan() {
		if len(bytes.TrimSpace(sca.Bytes())) == 0 {
			continue
		}
		var r trajRecord
		if err := json.Unmarshal(sca.Bytes(), &r); err != nil {
			return Result{}, fmt.Errorf("trajectory line %d: %w", len(recs)+1, err)
		}
		recs = append(recs, r)
	}
	if err := sca.Err(); err != nil {
		return Result{}, fmt.Errorf("read trajectory: %w", err)
	}
	var rows []Row
	from := 0
	for _, m := range s.Expect {
		if s.InOrder {
			at := -1
			for i := from; i < len(recs); i++ {
				if m.holds(recs[i]) {
					at = i
					break
				}
			}
			got := "none after the previous"
			if at >= 0 {
				got = "record " + strconv.FormatInt(recs[at].ID, 10)
				from = at + 1
			}
			rows = append(rows, Row{Check: "trajectory has " + m.String(), Expected: "in order", Got: got, Pass: at >= 0})
			continue
		}
		n := 0
		for _, r := range recs {
			if m.holds(r) {
				n++
			}
		}
		want, pass := "at least 1", n >= 1
		if m.Count != nil {
			want, pass = strconv.Itoa(*m.Count), n == *m.Count
		}
		rows = append(rows, Row{Check: "trajectory has " + m.String(), Expected: want, Got: strconv.Itoa(n), Pass: pass})
	}
	return verdict(rows), nil
}

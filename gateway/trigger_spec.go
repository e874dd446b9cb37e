package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// isoDurationRE is an ISO 8601 duration of weeks, days, hours, minutes and seconds.
var isoDurationRE = regexp.MustCompile(`^P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$`)

// parseISODuration parses an ISO 8601 duration such as PT30M or P1DT6H.
func parseISODuration(s string) (time.Duration, error) {
	m := isoDurationRE.FindStringSubmatch(s)
	if m == nil || s == "P" || s == "PT" || strings.HasSuffix(s, "T") {
		return 0, fmt.Errorf("duration %q: want ISO 8601 such as PT30M, P1DT6H", s)
	}
	units := []float64{7 * 86400, 86400, 3600, 60, 1}
	var secs float64
	for i, u := range units {
		if m[i+1] != "" {
			v, err := strconv.ParseFloat(m[i+1], 64)
			if err != nil {
				return 0, fmt.Errorf("duration %q: %w", s, err)
			}
			secs += v * u
		}
	}
	if secs > float64(math.MaxInt64)/float64(time.Second) {
		return 0, fmt.Errorf("duration %q: too long", s)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// checkSpec validates one trigger spec.
func checkSpec(s *TriggerSpec) error {
	w := s.When
	switch w.Type {
	case "action":
		if w.Tool == "" {
			return errors.New("when.tool: want a tool name pattern")
		}
		if w.Count != 0 || w.At != "" {
			return errors.New("when: count and at are not for action triggers")
		}
		for field, p := range w.Where {
			if err := checkPredicate(p); err != nil {
				return fmt.Errorf("when.where.%s: %w", field, err)
			}
		}
	case "turn":
		if w.Count <= 0 {
			return errors.New("when.count: want a positive number of calls")
		}
		if w.Tool != "" || w.Where != nil || w.At != "" || w.Repeat {
			return errors.New("when: a turn trigger takes count only")
		}
	case "time":
		if w.At == "" {
			return errors.New("when.at: want an RFC 3339 time or an ISO 8601 duration after the clock's start")
		}
		if w.Tool != "" || w.Where != nil || w.Count != 0 || w.Repeat {
			return errors.New("when: a time trigger takes at only")
		}
		if _, _, err := parseMark(w.At); err != nil {
			return fmt.Errorf("when.at: %w", err)
		}
	default:
		return fmt.Errorf("when.type %q: want action, turn or time", w.Type)
	}
	if b := s.Barrier; b != nil {
		if b.At != barrierAtProvokingCall {
			return fmt.Errorf("barrier.at %q: want %q", b.At, barrierAtProvokingCall)
		}
		if w.Type == "time" {
			return errors.New("barrier: a time trigger has no provoking call to hold")
		}
		if b.TimeoutSeconds < 0 || b.TimeoutSeconds > maxBarrierTimeout.Seconds() || math.IsNaN(b.TimeoutSeconds) {
			return fmt.Errorf("barrier.timeout_seconds: want 0 to %g", maxBarrierTimeout.Seconds())
		}
	}
	if len(s.Actions) == 0 {
		return errors.New("actions: want at least one")
	}
	for i, a := range s.Actions {
		if err := checkAction(a); err != nil {
			return fmt.Errorf("actions[%d]: %w", i, err)
		}
		for _, raw := range []json.RawMessage{a.Args, a.Params} {
			if w.Type == "time" && placeholderRE.Match(raw) {
				return fmt.Errorf("actions[%d]: ${args...} and ${result...} need a provoking call, which a time trigger has not", i)
			}
		}
	}
	return nil
}

func checkPredicate(p Predicate) error {
	n := 0
	if p.Regex != nil {
		n++
		if _, err := regexp.Compile(*p.Regex); err != nil {
			return fmt.Errorf("regex: %w", err)
		}
	}
	if len(p.Equals) > 0 {
		n++
	}
	if p.Exists != nil {
		n++
	}
	if n != 1 {
		return errors.New("want exactly one of regex, equals, exists")
	}
	return nil
}

func checkAction(a TriggerAction) error {
	switch a.Type {
	case "message":
		if a.Text == "" {
			return errors.New("text: want the message")
		}
	case "tool":
		if a.Tool == "" {
			return errors.New("tool: want a tool name")
		}
		if len(a.Args) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(a.Args, &obj); err != nil {
				return errors.New("args: want a JSON object")
			}
		}
		if a.As != "" {
			if err := validRole(a.As); err != nil {
				return fmt.Errorf("as: %w", err)
			}
		}
	case "permission":
		if a.Action != "enable" && a.Action != "disable" {
			return fmt.Errorf("action %q: want enable or disable", a.Action)
		}
		if err := validRole(normRole(a.Role)); err != nil {
			return fmt.Errorf("role: %w", err)
		}
		pats, err := toolPatterns(a.Tools)
		if err != nil {
			return err
		}
		if err := validPatterns(pats); err != nil {
			return fmt.Errorf("tools: %w", err)
		}
	case "data":
		if !strings.HasPrefix(a.Method, "data/") {
			return fmt.Errorf("method %q: want a data plane method such as data/add", a.Method)
		}
	default:
		return fmt.Errorf("type %q: want message, tool, permission or data", a.Type)
	}
	return nil
}

// toolPatterns reads a permission action's tools: a list of patterns, or "*".
func toolPatterns(raw json.RawMessage) ([]string, error) {
	var all string
	if json.Unmarshal(raw, &all) == nil {
		if all != "*" {
			return nil, fmt.Errorf("tools %q: want a list of patterns or \"*\"", all)
		}
		return []string{"*"}, nil
	}
	var pats []string
	if err := json.Unmarshal(raw, &pats); err != nil || len(pats) == 0 {
		return nil, errors.New("tools: want a list of patterns or \"*\"")
	}
	return pats, nil
}

// parseMark reads a time trigger's at: an absolute time, or a duration after the clock's t0.
func parseMark(at string) (abs time.Time, rel time.Duration, err error) {
	if strings.HasPrefix(at, "P") {
		rel, err = parseISODuration(at)
		return time.Time{}, rel, err
	}
	abs, err = parseVirtualTime(at)
	return abs, 0, err
}

package task

import (
	"fmt"
	"regexp"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv/task/bind"
)

// A value substituted into a step's fields is text everywhere but where package bind binds it:
// an sql step's query (query parameters) and the script of a shell's -c (quoted for where it
// stands).

// bindFields fills the fields of a step of type typ that take bound values (an sql step's
// query, a shell's -c script in a command) with the references ref matches, and returns the
// nodes it filled so that the plain text pass skips them. Values come from value.
func bindFields(typ string, fields *yaml.Node, ref *regexp.Regexp, value func(string) string) (map[*yaml.Node]bool, error) {
	done := map[*yaml.Node]bool{}
	if fields == nil || fields.Kind != yaml.MappingNode {
		return done, nil
	}
	for i := 0; i+1 < len(fields.Content); i += 2 {
		key, v := fields.Content[i].Value, fields.Content[i+1]
		switch {
		case typ == TypeSQL && key == "query" && v.Kind == yaml.ScalarNode:
			args := mapValue(fields, "args")
			n := 1
			if args != nil {
				n += len(args.Content)
			}
			q, vals, err := bind.SQL(v.Value, ref, value, n)
			if err != nil {
				return nil, fmt.Errorf("query: %w", err)
			}
			if len(vals) > 0 {
				if args == nil {
					args = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
					fields.Content = append(fields.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "args"}, args)
				}
				for _, a := range vals {
					args.Content = append(args.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: a, Style: yaml.DoubleQuotedStyle})
				}
				v.Value = q
			}
			done[v] = true
			if args != nil {
				for _, a := range args.Content[len(args.Content)-len(vals):] {
					done[a] = true // bound values are never filled again
				}
			}
		case typ == TypeDeploySandbox && key == "healthcheck" && v.Kind == yaml.MappingNode:
			// The healthcheck's command is a script run with sh -c.
			c := mapValue(v, "command")
			if c == nil || c.Kind != yaml.ScalarNode {
				continue
			}
			s, err := bind.Shell(c.Value, ref, value)
			if err != nil {
				return nil, fmt.Errorf("healthcheck.command: %w", err)
			}
			c.Value = s
			done[c] = true
		case key == "command" && v.Kind == yaml.SequenceNode:
			argv := make([]string, len(v.Content))
			for j, e := range v.Content {
				argv[j] = e.Value
			}
			j := bind.ScriptIndex(argv)
			if j < 0 || v.Content[j].Kind != yaml.ScalarNode {
				continue
			}
			s, err := bind.Shell(argv[j], ref, value)
			if err != nil {
				return nil, fmt.Errorf("command[%d]: %w", j, err)
			}
			v.Content[j].Value = s
			done[v.Content[j]] = true
		}
	}
	return done, nil
}

// mapValue returns the value of key in mapping m, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// checkBinding reports a placeholder or output reference in an sql query (field "query"), a
// healthcheck's script (field "healthcheck.command", given as query) or a shell's -c script in
// argv that stands where it could not be bound or quoted, so that a task file says so when it
// is loaded rather than when the step runs.
func checkBinding(field string, query string, argv []string) error {
	same := func(m string) string { return m }
	for _, p := range []*regexp.Regexp{placeholderP, refPattern} {
		if field == "healthcheck.command" {
			if _, err := bind.Shell(query, p, same); err != nil {
				return fmt.Errorf("%s: %w", field, err)
			}
			continue
		}
		if field == "query" {
			if _, _, err := bind.SQL(query, p, same, 1); err != nil {
				return fmt.Errorf("query: %w", err)
			}
			continue
		}
		if j := bind.ScriptIndex(argv); j >= 0 {
			if _, err := bind.Shell(argv[j], p, same); err != nil {
				return fmt.Errorf("%s[%d]: %w", field, j, err)
			}
		}
	}
	return nil
}

package task

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv/internal/suggest"
	"github.com/agentenv/agentenv/internal/yamlfile"
)

// validID is what a step id may look like: it appears in ${steps.<id>.outputs.<name>}.
var validID = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// validate checks the DAG, the references between steps and the output references, before
// anything runs. It runs whatever decode found, so that every error of the file is reported at
// once: a broken step's own fields are not checked again, and the checks that need a sound
// graph (is a step an ancestor of another) run only when the graph is.
func (t *Task) validate(d *decoder) {
	start := len(d.Errs)
	pos := map[string]int{}
	for i, s := range t.Steps {
		if s.ID == "" {
			continue
		}
		if !validID.MatchString(s.ID) {
			d.Errorf(s.Line, yamlfile.Join(s.path, "id"), "%q: want letters, digits, _ and -, starting with a letter or _", s.ID)
		}
		if j, dup := pos[s.ID]; dup {
			d.Errorf(s.Line, yamlfile.Join(s.path, "id"), "duplicate step id %q (first at line %d)", s.ID, t.Steps[j].Line)
			continue
		}
		pos[s.ID] = i
	}
	ids := make([]string, 0, len(t.Steps))
	for i, s := range t.Steps {
		if s.DependsOn == nil {
			s.DependsOn = append([]string{}, ids...)
		}
		ids = append(ids, s.ID)
		for j, dep := range s.DependsOn {
			p := yamlfile.Index(yamlfile.Join(s.path, "depends_on"), j)
			if _, ok := pos[dep]; !ok {
				d.Errorf(s.Line, p, "unknown step %q%s", dep, suggest.DidYouMean(dep, ids[:i]))
			}
		}
	}
	onCycle := t.cycles(d, pos)
	for i, s := range t.Steps {
		for j, dep := range s.DependsOn {
			if k, ok := pos[dep]; ok && k >= i && !onCycle[s.ID+"\x00"+dep] {
				d.Errorf(s.Line, yamlfile.Index(yamlfile.Join(s.path, "depends_on"), j),
					"step %q comes later: a step may depend only on earlier steps", dep)
			}
		}
	}
	graphOK := len(d.Errs) == start
	anc := t.ancestors()
	t.anc = anc
	seen := map[string]bool{}
	for _, s := range t.Steps {
		if !s.broken {
			t.validateStep(d, s, anc[s.ID], graphOK)
		}
		if r := s.Retry; r != nil {
			if r.From == "" {
				r.From = s.ID
			}
			if graphOK && r.From != s.ID && !anc[s.ID][r.From] {
				span := append([]string{s.ID}, slices.Sorted(maps.Keys(anc[s.ID]))...)
				d.Errorf(r.line, yamlfile.Join(s.path, "retry.from"), "step %q is not %q or a dependency of it%s", r.From, s.ID, suggest.DidYouMean(r.From, span))
			}
		}
		eachString(s.fields, func(n *yaml.Node) {
			for _, name := range placeholdersIn(n.Value) {
				if !seen[name] {
					seen[name] = true
					t.placeholders = append(t.placeholders, name)
				}
			}
		})
	}
	t.validateWeights(d)
}

// validateWeights refuses a task whose scored verifiers all have weight 0: it would score
// nothing it ran.
func (t *Task) validateWeights(d *decoder) {
	ids := t.Verifiers()
	if len(ids) == 0 {
		return
	}
	for _, id := range ids {
		if s := t.step(id); s == nil || s.Weight != 0 {
			return
		}
	}
	s := t.step(ids[0])
	d.Errorf(s.Line, yamlfile.Join(s.path, "weight"), "every verifier of the task's score has weight 0: give at least one a positive weight")
}

// cycles reports every cycle of the dependency graph, naming its steps in order, and returns
// the edges on them ("from\x00to").
func (t *Task) cycles(d *decoder, pos map[string]int) map[string]bool {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	edges := map[string]bool{}
	var stack []string
	var visit func(id string)
	visit = func(id string) {
		color[id] = grey
		stack = append(stack, id)
		s := t.Steps[pos[id]]
		for _, dep := range s.DependsOn {
			if _, ok := pos[dep]; !ok {
				continue // unknown, and already reported
			}
			switch color[dep] {
			case white:
				visit(dep)
			case grey:
				i := slices.Index(stack, dep)
				cyc := append(append([]string(nil), stack[i:]...), dep)
				for k := 0; k+1 < len(cyc); k++ {
					edges[cyc[k]+"\x00"+cyc[k+1]] = true
				}
				d.Errorf(s.Line, yamlfile.Join(s.path, "depends_on"), "dependency cycle: %s", strings.Join(cyc, " -> "))
			}
		}
		stack = stack[:len(stack)-1]
		color[id] = black
	}
	for _, s := range t.Steps {
		if color[s.ID] == white {
			visit(s.ID)
		}
	}
	return edges
}

// ancestors returns, for each step, the set of steps it transitively depends on.
func (t *Task) ancestors() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, s := range t.Steps { // steps depend only on earlier ones, so one pass suffices
		set := map[string]bool{}
		for _, dep := range s.DependsOn {
			set[dep] = true
			for a := range out[dep] {
				set[a] = true
			}
		}
		out[s.ID] = set
	}
	return out
}

// validateStep decodes a step's fields and checks its references to other steps; with
// graphOK, also that each step it refers to is among its ancestors anc. A reference to a step
// of no known type is not checked further (that step's type is the error).
func (t *Task) validateStep(d *decoder, s *StepSpec, anc map[string]bool, graphOK bool) {
	st, err := t.decodeFields(s, s.fields)
	if err != nil {
		d.Errs = append(d.Errs, err)
		return
	}
	for _, r := range st.Refs() {
		p := yamlfile.Join(s.path, r.Field)
		other := t.step(r.ID)
		switch {
		case r.ID == "":
			d.Errorf(s.Line, p, "missing step id")
		case other == nil:
			d.Errorf(s.Line, p, "unknown step %q%s", r.ID, suggest.DidYouMean(r.ID, t.stepIDs()))
		case !t.typed(other):
		case len(r.Types) > 0 && !slices.Contains(r.Types, other.Type):
			d.Errorf(s.Line, p, "step %q is a %s; want %s", r.ID, other.Type, strings.Join(r.Types, " or "))
		case graphOK && !anc[r.ID]:
			d.Errorf(s.Line, p, "step %q is not a dependency of %q: add it to depends_on", r.ID, s.ID)
		}
	}
	eachString(s.fields, func(n *yaml.Node) {
		for _, ref := range outputRefs(n.Value) {
			p := s.path + " (" + s.ID + ")"
			other := t.step(ref.step)
			switch {
			case ref.bad != "":
				d.Errorf(n.Line, p, "bad output reference %q: want ${steps.<id>.outputs.<name>}", ref.bad)
			case other == nil:
				d.Errorf(n.Line, p, "%s: unknown step %q%s", ref.text, ref.step, suggest.DidYouMean(ref.step, t.stepIDs()))
			case graphOK && !anc[ref.step]:
				d.Errorf(n.Line, p, "%s: step %q is not a dependency of %q: add it to depends_on", ref.text, ref.step, s.ID)
			case !t.typed(other):
			default:
				if _, ok := t.kinds[other.Type].output(ref.name); !ok {
					d.Errorf(n.Line, p, "%s: a %s step has no output %q (it has %s)", ref.text, other.Type, ref.name, outputNames(t.kinds[other.Type]))
				}
			}
		}
	})
}

// checkProviders checks with check the provider each step names as text without placeholders.
func (t *Task) checkProviders(d *decoder, check func(chain string) error) {
	for _, s := range t.Steps {
		p := providerField(s.fields)
		if s.broken || p == nil || len(placeholdersIn(p.Value)) > 0 || len(outputRefs(p.Value)) > 0 {
			continue
		}
		if err := check(p.Value); err != nil {
			d.Errorf(p.Line, s.path+" ("+s.ID+").provider", "%v", err)
		}
	}
}

// providerField returns the provider a step's fields name, or nil if they name none.
func providerField(fields *yaml.Node) *yaml.Node {
	if p := field(fields, "provider"); p != nil && p.Kind == yaml.ScalarNode && p.Value != "" {
		return p
	}
	return nil
}

// typed reports whether s is of a known step type.
func (t *Task) typed(s *StepSpec) bool {
	_, ok := t.kinds[s.Type]
	return ok
}

func (t *Task) stepIDs() []string {
	out := make([]string, len(t.Steps))
	for i, s := range t.Steps {
		out[i] = s.ID
	}
	return out
}

func outputNames(k kind) string {
	var names []string
	for _, o := range k.outputsOf() {
		names = append(names, o.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// outputRef is one ${steps.<id>.outputs.<name>} in a string.
type outputRef struct {
	text, step, name string
	bad              string // set when it starts like a reference but is malformed
}

var (
	refPattern = regexp.MustCompile(`\$\{steps\.([A-Za-z_][A-Za-z0-9_-]*)\.outputs\.([A-Za-z_][A-Za-z0-9_]*)\}`)
	// refStart is what may have been meant as a reference: ${, a name and a dot. Whether it
	// was is decided by the name (see outputRefs).
	refStart     = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_-]*)\.[^}]*\}?`)
	placeholderP = regexp.MustCompile(`<([A-Za-z_][A-Za-z0-9_]*)>`)
)

// outputRefs finds the output references in s.
func outputRefs(s string) []outputRef {
	if !strings.Contains(s, "${") {
		return nil
	}
	var out []outputRef
	for _, loc := range refStart.FindAllStringSubmatchIndex(s, -1) {
		text := s[loc[0]:loc[1]]
		// ${step.x...} or ${Steps.x...} is a misspelt reference, to refuse rather than pass on
		// as text; a name far from "steps" is content's own (a JS template's ${user.name}).
		if word := s[loc[2]:loc[3]]; word != "steps" {
			if suggest.Distance(strings.ToLower(word), "steps") <= 2 {
				out = append(out, outputRef{bad: text})
			}
			continue
		}
		m := refPattern.FindStringSubmatch(text)
		if m == nil || m[0] != text {
			out = append(out, outputRef{bad: text})
			continue
		}
		out = append(out, outputRef{text: text, step: m[1], name: m[2]})
	}
	return out
}

// placeholdersIn returns the <name> placeholders in s.
func placeholdersIn(s string) []string {
	var out []string
	for _, m := range placeholderP.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// fillPlaceholders returns a copy of the fields of a step of type typ with every <name>
// replaced from seed (bound as a query parameter or shell-quoted where bindFields says), or an
// error naming the first placeholder seed lacks.
func fillPlaceholders(typ string, fields *yaml.Node, seed map[string]string) (*yaml.Node, error) {
	c := cloneNode(fields)
	var missing []string
	value := func(m string) string {
		name := m[1 : len(m)-1]
		v, ok := seed[name]
		if !ok {
			if !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
			return m
		}
		return v
	}
	done, err := bindFields(typ, c, placeholderP, value)
	if err != nil {
		return nil, err
	}
	eachString(c, func(n *yaml.Node) {
		if !done[n] {
			n.Value = placeholderP.ReplaceAllStringFunc(n.Value, value)
		}
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("placeholder <%s> has no value", strings.Join(missing, ">, <"))
	}
	return c, nil
}

// fillOutputs returns a copy of the fields of a step of type typ with every output reference
// replaced by lookup's value (bound as a query parameter or shell-quoted where bindFields says).
func fillOutputs(typ string, fields *yaml.Node, lookup func(step, name string) (string, error)) (*yaml.Node, error) {
	c := cloneNode(fields)
	var firstErr error
	value := func(m string) string {
		sub := refPattern.FindStringSubmatch(m)
		v, err := lookup(sub[1], sub[2])
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", m, err)
		}
		return v
	}
	done, err := bindFields(typ, c, refPattern, value)
	if err != nil {
		return nil, err
	}
	eachString(c, func(n *yaml.Node) {
		if done[n] || !strings.Contains(n.Value, "${steps.") {
			return
		}
		n.Value = refPattern.ReplaceAllStringFunc(n.Value, value)
	})
	return c, firstErr
}

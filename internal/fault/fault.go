// Package fault injects failures into any agentenv.Provider or agentenv.Ledger, for tests: on
// call N of an operation it returns an error, hangs until its context ends, cancels the caller,
// panics, or loses the response of a call that did succeed. The same plans wrap the in-memory
// fake provider in unit tests and the real Docker provider in integration tests, and the CLI's
// hidden AGENTENV_FAULTS setting uses them to make a real backend misbehave on demand.
package fault

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Action is what a rule does when it fires.
type Action string

// Actions.
const (
	Error  Action = "error"  // return Err (ErrInjected if nil) without calling through
	Hang   Action = "hang"   // block until the call's context ends, then return its error
	Cancel Action = "cancel" // call the rule's Cancel func (the caller's), then call through
	Panic  Action = "panic"  // panic without calling through
	Lost   Action = "lost"   // call through, then return Err as if the response were lost
)

// ErrInjected is the error an Error or Lost rule returns when it names none.
var ErrInjected = errors.New("injected fault")

// Rule fires Action on the Call-th call (1-based; 0 means every call) of operation Op.
// Provider operations are the names agentenv.Ops returns. Ledger operations: put, get, update,
// list, renew.
type Rule struct {
	Op     string
	Call   int
	Action Action
	Err    error
	Cancel context.CancelFunc // for Cancel
}

// Plan is a set of rules; it counts calls per operation and is safe for concurrent use.
type Plan struct {
	mu    sync.Mutex
	rules []Rule
	calls map[string]int
}

// NewPlan returns a plan with rules.
func NewPlan(rules ...Rule) *Plan {
	return &Plan{rules: rules, calls: map[string]int{}}
}

// Parse reads a plan from its text form, a comma list of op:call:action such as
// "create:1:hang,terminate:2:error" (call may be *, meaning every call).
func Parse(s string) (*Plan, error) {
	var rules []Rule
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		parts := strings.Split(f, ":")
		if len(parts) != 3 {
			return nil, fmt.Errorf("fault %q: want op:call:action", f)
		}
		n := 0
		if parts[1] != "*" {
			var err error
			if n, err = strconv.Atoi(parts[1]); err != nil || n < 1 {
				return nil, fmt.Errorf("fault %q: call must be a positive number or *", f)
			}
		}
		a := Action(parts[2])
		switch a {
		case Error, Hang, Panic, Lost:
		default:
			return nil, fmt.Errorf("fault %q: action must be error, hang, panic or lost", f)
		}
		rules = append(rules, Rule{Op: parts[0], Call: n, Action: a})
	}
	return NewPlan(rules...), nil
}

// Ops returns the operations the plan's rules name, in rule order.
func (p *Plan) Ops() []string {
	out := make([]string, len(p.rules))
	for i, r := range p.rules {
		out[i] = r.Op
	}
	return out
}

// Calls returns how many calls of op the plan has seen.
func (p *Plan) Calls(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[op]
}

// next counts a call of op and returns the rule that fires on it, if any.
func (p *Plan) next(op string) (Rule, bool) {
	if p == nil {
		return Rule{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[op]++
	n := p.calls[op]
	for _, r := range p.rules {
		if r.Op == op && (r.Call == 0 || r.Call == n) {
			return r, true
		}
	}
	return Rule{}, false
}

// do applies the rule for op around call.
func do[T any](ctx context.Context, p *Plan, op string, call func() (T, error)) (T, error) {
	var zero T
	r, ok := p.next(op)
	if !ok {
		return call()
	}
	err := r.Err
	if err == nil {
		err = fmt.Errorf("%s: %w", op, ErrInjected)
	}
	switch r.Action {
	case Error:
		return zero, err
	case Hang:
		<-ctx.Done()
		return zero, fmt.Errorf("%s: hung: %w", op, ctx.Err())
	case Cancel:
		if r.Cancel != nil {
			r.Cancel()
		}
		return call()
	case Panic:
		panic(fmt.Sprintf("injected panic in %s", op))
	case Lost:
		if _, cerr := call(); cerr != nil {
			return zero, cerr
		}
		return zero, err
	}
	return call()
}

package harbor

import (
	"slices"
	"strings"

	"github.com/agentenv/agentenv/task"
)

// PolicyFile is where, in the egress proxy's sandbox, the policy of each phase of a task whose
// phases differ in network mode is written (egressproxy.WritePolicy) and read by the proxy.
const PolicyFile = "/tmp/egress-policy.json"

// netPolicy is a network mode with its allowed hosts (NetworkAllowlist only).
type netPolicy struct {
	mode  string
	hosts []string
}

func (p netPolicy) equal(q netPolicy) bool {
	return p.mode == q.mode && slices.Equal(p.hosts, q.hosts)
}

// flags are the egress proxy's (and egress-policy's) flags that let through what p does.
func (p netPolicy) flags() []string {
	switch {
	case p.mode == NetworkPublic:
		return []string{"--any"}
	case p.mode == NetworkAllowlist && len(p.hosts) > 0:
		return []string{"--allow", strings.Join(p.hosts, ",")}
	}
	return nil // no-network, or an allowlist of no hosts: nothing
}

// envPolicy is [environment]'s network policy: the baseline of every phase.
func envPolicy(t *Task) netPolicy {
	if !t.Environment.AllowInternet {
		return netPolicy{mode: NetworkNone}
	}
	return netPolicy{mode: t.Environment.NetworkMode, hosts: t.Environment.AllowedHosts}
}

// overPolicy is a phase's policy: its own network_mode, else base.
func overPolicy(base netPolicy, mode string, hosts []string) netPolicy {
	if mode == "" {
		return base
	}
	return netPolicy{mode: mode, hosts: hosts}
}

// phaseList is t's phases: its [[steps]], or the task itself as one.
func phaseList(t *Task) []Step {
	if len(t.Steps) > 0 {
		return t.Steps
	}
	return []Step{{Instruction: t.Instruction, Agent: t.Agent, Verifier: t.Verifier, Dir: t.Dir}}
}

// phased reports whether a phase of t ([agent] or [verifier], a step's too) asks for a network
// policy other than [environment]'s: its container then reaches out through the egress proxy
// in every phase (a "public" one too, the proxy letting every host through), and the proxy's
// policy is switched before each agent phase and each verifier (policySteps).
func phased(t *Task) bool {
	base := envPolicy(t)
	for _, ph := range phaseList(t) {
		if !overPolicy(base, ph.Agent.NetworkMode, ph.Agent.AllowedHosts).equal(base) ||
			!overPolicy(base, ph.Verifier.NetworkMode, ph.Verifier.AllowedHosts).equal(base) {
			return true
		}
	}
	return false
}

// policyStep is the step, after the step after, that switches the egress proxy to p and ends
// once the proxy has applied it: every tunnel and forwarded request it no longer allows closed.
func policyStep(id, after string, p netPolicy) step {
	command := append([]string{"/agentenv", "serve", "egress-policy", "--file", PolicyFile}, p.flags()...)
	return step{"id": id, "type": task.TypeExec, "sandbox": egressStep, "command": command, "depends_on": []string{after}}
}

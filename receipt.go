package agentenv

import "time"

// Outcome is what a teardown did to one sandbox.
type Outcome string

// Teardown outcomes. Terminated and AlreadyGone both count as down.
const (
	OutcomeTerminated  Outcome = "terminated"
	OutcomeAlreadyGone Outcome = "already_gone"
	OutcomeFailed      Outcome = "failed"       // the terminate returned an error; see Reason
	OutcomeStillListed Outcome = "still_listed" // the provider still lists it after the teardown
	OutcomeLeft        Outcome = "left"         // not attempted: the teardown was stopped first
)

// Down reports whether o means the sandbox is no longer running.
func (o Outcome) Down() bool { return o == OutcomeTerminated || o == OutcomeAlreadyGone }

// ReceiptItem is one sandbox's line in a Receipt.
type ReceiptItem struct {
	Record    string  `json:"record"`
	SandboxID string  `json:"sandbox_id,omitempty"`
	Provider  string  `json:"provider"`
	Kind      Kind    `json:"kind"`
	Role      Role    `json:"role,omitempty"`
	Outcome   Outcome `json:"outcome"`
	Reason    string  `json:"reason,omitempty"`
}

// Receipt is the verified result of a teardown: what each sandbox became, checked by listing
// the providers again after the terminates.
type Receipt struct {
	Items    []ReceiptItem `json:"items"`
	Started  time.Time     `json:"started"`
	Finished time.Time     `json:"finished"`
}

// Clean reports whether every sandbox in the receipt is down.
func (r Receipt) Clean() bool {
	for _, it := range r.Items {
		if !it.Outcome.Down() {
			return false
		}
	}
	return true
}

// Count returns how many items have outcome o.
func (r Receipt) Count(o Outcome) int {
	n := 0
	for _, it := range r.Items {
		if it.Outcome == o {
			n++
		}
	}
	return n
}

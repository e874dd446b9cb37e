package agentenv

import "time"

// Run is the ledger's document for one run of a task: its steps, score and teardown receipt.
// Secrets are never written into it.
type Run struct {
	ID         string            `json:"id"`
	Task       string            `json:"task"`
	TaskDigest string            `json:"task_digest"`
	Status     RunStatus         `json:"status"`
	Steps      []StepRecord      `json:"steps,omitempty"`
	Score      *float64          `json:"score,omitempty"`
	Error      string            `json:"error,omitempty"`
	Receipt    *Receipt          `json:"receipt,omitempty"`
	Attrs      map[string]string `json:"attrs,omitempty"`
	// Attempts are the attempts that ended in an infrastructure error and were retried, in
	// order; the run's own fields are its last attempt.
	Attempts []RunAttempt `json:"attempts,omitempty"`
	Created  time.Time    `json:"created"`
	Ended    time.Time    `json:"ended,omitzero"`
}

// DocID implements Doc.
func (r Run) DocID() string { return r.ID }

// DocState implements Doc.
func (r Run) DocState() string { return string(r.Status) }

// DocCreated implements Doc.
func (r Run) DocCreated() time.Time { return r.Created }

// StepRecord is one step of a run as recorded.
type StepRecord struct {
	ID      string            `json:"id"`
	Type    string            `json:"type"`
	Status  StepStatus        `json:"status"`
	Started time.Time         `json:"started,omitzero"`
	Ended   time.Time         `json:"ended,omitzero"`
	Outputs map[string]string `json:"outputs,omitempty"`
	Score   *float64          `json:"score,omitempty"`
	Error   string            `json:"error,omitempty"`
	// ErrorKind says whose failure Error is; empty without an error.
	ErrorKind StepErrorKind `json:"error_kind,omitempty"`
}

// StepErrorKind says whose failure a step's error is.
type StepErrorKind string

// Step error kinds.
const (
	// StepErrorAgent is the agent's own failure (it answered badly, erred, hit a cap): part
	// of the score.
	StepErrorAgent StepErrorKind = "agent"
	// StepErrorInfra is the infrastructure's (a deploy, a provider, a port, a model endpoint's
	// 5xx or timeout, a verifier that could not run): an episode ending on it is no sample.
	StepErrorInfra StepErrorKind = "infra"
)

// RunAttempt is one attempt of a run that was retried after an infrastructure error: of the
// whole episode (Span empty) or of a span of its steps (Span "FROM..STEP").
type RunAttempt struct {
	Attempt   int           `json:"attempt"`        // 1-based
	Span      string        `json:"span,omitempty"` // empty for the whole episode
	Step      string        `json:"step,omitempty"` // the step whose error ended the attempt
	Error     string        `json:"error,omitempty"`
	ErrorKind StepErrorKind `json:"error_kind,omitempty"`
	Started   time.Time     `json:"started"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	Receipt   *Receipt      `json:"receipt,omitempty"` // the teardown of what the attempt made
}

// RunStatus is where a run document stands.
type RunStatus string

// Run statuses.
const (
	RunRunning   RunStatus = "running"
	RunCompleted RunStatus = "completed" // every step ran; the score says how well
	RunFailed    RunStatus = "failed"    // a fatal step failed
	RunError     RunStatus = "error"     // an infrastructure error ended it, after its retries
	RunCancelled RunStatus = "cancelled" // interrupted
)

// StepStatus is where a step of a run stands. A verifier that ran to the end has status
// passed whatever its score; its verdict is the score.
type StepStatus string

// Step statuses.
const (
	StepPending   StepStatus = "pending"
	StepRunning   StepStatus = "running"
	StepPassed    StepStatus = "passed"
	StepFailed    StepStatus = "failed"
	StepSkipped   StepStatus = "skipped"
	StepCancelled StepStatus = "cancelled"
)

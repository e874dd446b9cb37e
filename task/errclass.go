package task

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
)

// kindError carries a kind decided where the error arose, such as a verifier that did not run
// because the agent step it checks failed: the kind of that agent's failure.
type kindError struct {
	kind agentenv.StepErrorKind
	err  error
}

func (e *kindError) Error() string { return e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

// withKind marks err as being of kind k.
func withKind(k agentenv.StepErrorKind, err error) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: k, err: err}
}

// classify says whose failure a step's error is; "" for no error. The agent's own failures
// are: errors wrapping agent.ErrAgent (a model agent's cap, an A2A task failed with
// agentenv.error_kind=agent, a harness that exited non-zero), a prompt_agent step that ran
// out of its own timeout, an SQL verifier whose query the service DB refused (the checked
// state is not there), and what a step marked with withKind says. Everything else is the
// infrastructure's: deploys, providers, ports, the lifecycle, a model endpoint's 5xx or
// timeout, a verifier that could not run, a judge that did not answer with a score.
func classify(stepType string, err error) agentenv.StepErrorKind {
	if err == nil {
		return ""
	}
	var ke *kindError
	if errors.As(err, &ke) {
		return ke.kind
	}
	if errors.Is(err, agent.ErrAgent) {
		return agentenv.StepErrorAgent
	}
	if stepType == TypePromptAgent && errors.Is(err, errStepTimeout) {
		return agentenv.StepErrorAgent
	}
	var pg *pgconn.PgError
	if stepType == TypeSQL && errors.As(err, &pg) {
		return agentenv.StepErrorAgent
	}
	return agentenv.StepErrorInfra
}

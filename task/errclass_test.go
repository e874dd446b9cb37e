package task

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/a2a"
)

func TestClassify(t *testing.T) {
	agentErr, infra := agentenv.StepErrorAgent, agentenv.StepErrorInfra
	tests := []struct {
		name string
		typ  string
		err  error
		want agentenv.StepErrorKind
	}{
		{"no error", TypeExec, nil, ""},
		{"model agent cap", TypePromptAgent, fmt.Errorf("turn budget of 3 exhausted: %w", agent.ErrAgent), agentErr},
		{"a2a task failed, kind agent", TypePromptAgent, fmt.Errorf("a2a agent at x: task failed: %w", agent.ErrAgent), agentErr},
		{"a2a task failed, kind infra", TypePromptAgent, fmt.Errorf("a2a agent at x: task failed (%s)", a2a.ErrorKindInfra), infra},
		{"prompt step ran out of its timeout", TypePromptAgent, fmt.Errorf("%w after 1m: %w", errStepTimeout, context.DeadlineExceeded), agentErr},
		{"other step ran out of its timeout", TypeDeployEnv, fmt.Errorf("%w after 1m: %w", errStepTimeout, context.DeadlineExceeded), infra},
		{"model endpoint 5xx", TypePromptAgent, errors.New(`POST "http://m/v1/chat/completions": 503 Service Unavailable`), infra},
		{"model endpoint timeout", TypePromptAgent, fmt.Errorf("model: %w", context.DeadlineExceeded), infra},
		{"provider unavailable", TypeDeploySandbox, fmt.Errorf("create: %w", agentenv.ErrUnavailable), infra},
		{"deploy failed", TypeDeployEnv, errors.New("deploy notes: component db: not ready"), infra},
		{"port refused", TypeCallTool, errors.New("dial tcp 127.0.0.1:4000: connect: connection refused"), infra},
		{"lifecycle", TypeExec, fmt.Errorf("exec: record r-1: %w", agentenv.ErrNotFound), infra},
		{"verifier could not run", TypeFileContains, errors.New("read file: engine gone"), infra},
		{"sql refused by the DB", TypeSQL, fmt.Errorf("query: %w", &pgconn.PgError{Code: "42P01", Message: "relation notes does not exist"}), agentErr},
		{"sql could not connect", TypeSQL, errors.New("connect to service DB: dial tcp: refused"), infra},
		{"verifier of a failed agent", TypeResponseMatches, withKind(agentErr, errors.New("agent step a failed")), agentErr},
		{"verifier of an agent that never ran", TypeResponseMatches, withKind(infra, errors.New("agent step a skipped")), infra},
		{"judge malformed answer", TypeJudge, fmt.Errorf("judge: %w", errJudgeAnswer), infra},
		{"script verifier exec failed", TypeScript, errors.New("exec: sandbox gone"), infra},
	}
	for _, tc := range tests {
		if got := classify(tc.typ, tc.err); got != tc.want {
			t.Errorf("%s: classify(%s, %v) = %q, want %q", tc.name, tc.typ, tc.err, got, tc.want)
		}
		// Wrapping keeps the kind: the fatal error of an episode wraps its step's.
		if tc.err != nil {
			if got := classify(tc.typ, fmt.Errorf("step x: %w", tc.err)); got != tc.want {
				t.Errorf("%s wrapped: %q, want %q", tc.name, got, tc.want)
			}
		}
	}
}

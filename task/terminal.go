package task

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/lifecycle"
)

// killGrace is how long coreutils timeout waits after its TERM before it KILLs a command (-k).
const killGrace = 5 * time.Second

// probeTimeout bounds the command that learns what a sandbox's shell has.
const probeTimeout = 30 * time.Second

// sandboxTerminal is an agent.Terminal over the sandbox of one record, through the lifecycle
// manager: the shell of a deploy_sandbox step an agent works in.
type sandboxTerminal struct {
	m      *lifecycle.Manager
	record string

	mu     sync.Mutex
	probed bool
	shell  string // bash if the sandbox has it, else sh
	gnu    bool   // the sandbox has coreutils timeout
}

// newTerminal is the terminal of record's sandbox.
func newTerminal(m *lifecycle.Manager, record string) *sandboxTerminal {
	return &sandboxTerminal{m: m, record: record}
}

// probe learns, once, whether the sandbox has bash and coreutils timeout.
func (t *sandboxTerminal) probe(ctx context.Context) (shell string, gnu bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.probed {
		return t.shell, t.gnu, nil
	}
	cctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	const script = `command -v bash >/dev/null 2>&1 && echo bash; timeout --version 2>/dev/null | head -n 1 | grep -q coreutils && echo timeout; true`
	res, err := t.m.Exec(cctx, t.record, []string{"sh", "-c", script})
	if err != nil {
		return "", false, fmt.Errorf("terminal: probe the sandbox's shell: %w", err)
	}
	if res.ExitCode != 0 {
		return "", false, fmt.Errorf("terminal: probe the sandbox's shell: sh exited %d: %s", res.ExitCode, tail(string(res.Stderr), 200))
	}
	out := strings.Fields(string(res.Stdout))
	t.shell = "sh"
	for _, w := range out {
		switch w {
		case "bash":
			t.shell = "bash"
		case "timeout":
			t.gnu = true
		}
	}
	t.probed = true
	return t.shell, t.gnu, nil
}

// Run implements agent.Terminal.
func (t *sandboxTerminal) Run(ctx context.Context, command string, timeout time.Duration) (agent.TerminalResult, error) {
	shell, gnu, err := t.probe(ctx)
	if err != nil {
		return agent.TerminalResult{}, err
	}
	res, timedOut, err := execBounded(ctx, t.m, t.record, []string{shell, "-c", command}, timeout, gnu)
	out := agent.TerminalResult{ExitCode: res.ExitCode, Stdout: lastBytes(res.Stdout, agent.MaxOutput),
		Stderr: lastBytes(res.Stderr, agent.MaxOutput), TimedOut: timedOut}
	if err != nil {
		return out, fmt.Errorf("terminal: %w", err)
	}
	return out, nil
}

// ReadFile implements agent.Terminal.
func (t *sandboxTerminal) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return t.m.ReadFile(ctx, t.record, path)
}

// WriteFile implements agent.Terminal.
func (t *sandboxTerminal) WriteFile(ctx context.Context, path string, data []byte) error {
	return t.m.WriteFile(ctx, t.record, path, data)
}

// execBounded runs argv in the sandbox of record for at most limit. With gnu (the sandbox has
// coreutils timeout) argv runs under `timeout -k 5 SECONDS`, so that the process in the
// sandbox is stopped too and its output kept as far as it got; the exec's context ends a
// little after that in any case. timedOut says the limit stopped the command: an error is
// then nil unless ctx itself ended.
func execBounded(ctx context.Context, m *lifecycle.Manager, record string, argv []string, limit time.Duration, gnu bool) (res agentenv.ExecResult, timedOut bool, err error) {
	bound := limit
	if gnu {
		secs := int64(math.Ceil(limit.Seconds()))
		argv = append([]string{"timeout", "-k", strconv.Itoa(int(killGrace.Seconds())), strconv.FormatInt(secs, 10)}, argv...)
		bound = time.Duration(secs)*time.Second + killGrace + 5*time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	res, err = m.Exec(cctx, record, argv)
	switch {
	case ctx.Err() != nil:
		return res, false, ctx.Err()
	case cctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		if res.ExitCode == 0 {
			res.ExitCode = -1
		}
		return res, true, nil
	case err != nil:
		return res, false, err
	case gnu && (res.ExitCode == 124 || res.ExitCode == 137) && time.Since(start) >= limit:
		return res, true, nil
	}
	return res, false, nil
}

// lastBytes is the last n bytes of b as text.
func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

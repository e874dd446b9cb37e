// Command agentenv deploys agent environments into sandboxes, runs graded episodes against them,
// and tears every sandbox down, with a ledger that remembers each one before it is created.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1   // the command ran and something failed (or scored below 1)
	exitBadInput = 2   // the command was given something invalid; nothing was done
	exitSIGINT   = 130 // interrupted with Ctrl-C
	exitSIGTERM  = 143 // terminated
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line args and returns the process exit code. The first SIGINT or
// SIGTERM cancels the command's context: it stops what it is doing and tears down what it made.
// The second fires the hard stop: teardown stops waiting, and the command prints what is left and
// how gc will finish it. A third exits at once.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	hard := make(chan struct{})
	ctx = cleanup.WithHardStop(ctx, hard)

	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		s, ok := <-sigs
		if !ok {
			return
		}
		fmt.Fprintln(stderr, "agentenv: interrupted; tearing down what was made (interrupt again to stop waiting)")
		cancel(errInterrupted{s})
		if _, ok := <-sigs; !ok {
			return
		}
		fmt.Fprintln(stderr, "agentenv: stopped waiting; what is left is in the ledger: run `agentenv gc` to finish")
		close(hard)
		if _, ok := <-sigs; ok {
			os.Exit(signalCode(s))
		}
	}()

	root, closeApp := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	closeApp()
	var ie errInterrupted
	if errors.As(context.Cause(ctx), &ie) {
		if err != nil && !errors.Is(err, context.Canceled) && !errors.As(err, &ie) {
			fmt.Fprintln(stderr, "agentenv:", err)
		}
		return signalCode(ie.sig)
	}
	if err == nil {
		return exitOK
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "agentenv:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "agentenv:", err)
	code := exitFailed
	if errors.Is(err, agentenv.ErrInvalid) || errors.As(err, new(usageError)) {
		code = exitBadInput
	}
	if wantsJSON(cmd) {
		// A caller that parses --json output gets the error in the same form.
		b, _ := json.MarshalIndent(map[string]any{"error": err.Error(), "exit_code": code}, "", "  ")
		fmt.Fprintln(stdout, string(b))
	}
	return code
}

// wantsJSON reports whether cmd was given --json.
func wantsJSON(cmd *cobra.Command) bool {
	if cmd == nil {
		return false
	}
	f := cmd.Flags().Lookup("json")
	return f != nil && f.Value.String() == "true"
}

func signalCode(s os.Signal) int {
	if s == syscall.SIGTERM {
		return exitSIGTERM
	}
	return exitSIGINT
}

// errInterrupted is the cancellation cause when a signal arrives.
type errInterrupted struct{ sig os.Signal }

func (e errInterrupted) Error() string { return "interrupted by " + e.sig.String() }

// exitError makes a command exit with code after printing msg (if any).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// usageError is a mistake in the command line itself.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

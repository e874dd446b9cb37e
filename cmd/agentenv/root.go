package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
)

// newRoot builds the command tree; call the returned func once the command has run, to close
// what the command opened.
func newRoot(stdin io.Reader, stdout, stderr io.Writer) (*cobra.Command, func()) {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "agentenv",
		Short: "Deploy agent environments into sandboxes, run graded episodes, and never forget a sandbox",
		Long: `agentenv deploys agent environments (MCP servers, their PostgreSQL state and sidecars,
behind an MCP gateway) into sandboxes, runs graded episodes against them, and tears every
sandbox down. Every sandbox is written to a ledger before it is created, every teardown is
verified, and 'agentenv gc' finds whatever a killed process left behind.

Chaos testing: AGENTENV_FAULTS makes a provider misbehave on purpose, to check that nothing
leaks when a backend fails. It is a comma list of PROVIDER/OP:CALL:ACTION, where OP is a
provider operation (any other is refused):
  ` + strings.Join(agentenv.Ops(), ", ") + `
CALL is the 1-based call number or * for every call, and ACTION is error, hang (until the
call's timeout), panic or lost (the call succeeds but its answer is lost). For example
  AGENTENV_FAULTS='docker/create:2:error,docker/terminate:*:lost' agentenv run ...`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.load(cmd) },
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.config, "config", "", "config file (default: .agentenv/config.toml found upwards, or $AGENTENV_CONFIG)")
	pf.StringVar(&a.flags.ledger, "ledger", "", "ledger DSN: a bbolt file path or postgres://… (overrides ledger.dsn)")
	pf.StringVar(&a.flags.logLevel, "log-level", "", "debug, info, warn or error (overrides log.level)")

	root.AddCommand(
		newRunCmd(a),
		newRunsCmd(a),
		newSandboxCmd(a),
		newGCCmd(a),
		newLedgerCmd(a),
		newConfigCmd(a),
		newVersionCmd(a),
		newEnvCmd(a),
		newServeCmd(a),
		newStdioBridgeCmd(a),
		newResolveCmd(a),
		newGatewayCmd(a),
		newImagesCmd(a),
		newSoakCmd(a),
		newBenchCmd(a),
		newUICmd(a),
		newStateCmd(a),
		newTasksCmd(a),
		newWorkerCmd(a),
		newPushCmd(a),
		newPullCmd(a),
		newBundlesCmd(a),
	)
	strictArgs(root)
	return root, a.close
}

// strictArgs makes every mistake in the shape of a command line under c a usageError (exit 2):
// a word that names no subcommand of a command that only groups others, and a wrong number of
// arguments. cobra's own errors for these are plain ones, a group given an unknown word prints
// its help and succeeds, and a command that declares no Args takes any and ignores them: here
// it takes none.
func strictArgs(c *cobra.Command) {
	for _, sub := range c.Commands() {
		strictArgs(sub)
	}
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if cmd.SuggestionsMinimumDistance <= 0 {
				cmd.SuggestionsMinimumDistance = 2
			}
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
			}
			return usageError{msg}
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		return
	}
	if c.Args == nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
			}
			return nil
		}
		return
	}
	check := c.Args
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			if errors.As(err, new(usageError)) {
				return err
			}
			return usageError{fmt.Sprintf("%s: %v", cmd.CommandPath(), err)}
		}
		return nil
	}
}

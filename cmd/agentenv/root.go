package main

import (
	"io"

	"github.com/spf13/cobra"
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
provider operation (create, get, terminate, list, create_network, create_vm, run_in_vm,
remove_from_vm, exec_in_vm, exec, write_file, read_file, ensure_image, logs), CALL is the
1-based call number or * for every call, and ACTION is error, hang (until the call's
timeout), panic or lost (the call succeeds but its answer is lost). For example
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
	)
	return root, a.close
}

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
verified, and 'agentenv gc' finds whatever a killed process left behind.`,
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
	pf.StringVar(&a.flags.ledger, "ledger", "", "ledger DSN: a SQLite path or postgres://… (overrides ledger.dsn)")
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
	)
	return root, a.close
}

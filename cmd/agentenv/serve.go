package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/dbmcp"
	"github.com/agentenv/agentenv/examples/kv"
	"github.com/agentenv/agentenv/examples/notes"
	"github.com/agentenv/agentenv/examples/shop"
	"github.com/agentenv/agentenv/stdiobridge"
)

// newServeCmd serves the env servers built into the binary, so that one small image runs every
// Go component.
func newServeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "serve", Short: "Serve a built-in env server (notes, kv, db-mcp), the shop website, the built-in agent over A2A, or a Harbor task's egress proxy"}
	var listen, dsn, schema string
	var stdio bool
	notesCmd := &cobra.Command{
		Use:   "notes [--listen ADDR] [--database-url URL]",
		Short: "The notes env: MCP tools over notes kept in the service DB",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn == "" {
				dsn = os.Getenv("DATABASE_URL")
			}
			return notes.Run(cmd.Context(), notes.Config{Listen: listen, DatabaseURL: dsn, Schema: schema, Stdio: stdio}, a.log)
		},
	}
	notesCmd.Flags().StringVar(&dsn, "database-url", "", "PostgreSQL URL (default: $DATABASE_URL)")
	notesCmd.Flags().StringVar(&schema, "schema", "", "schema to keep the notes in (default: $DATABASE_SCHEMA, else notes)")
	kvCmd := &cobra.Command{
		Use:   "kv [--listen ADDR | --stdio]",
		Short: "The kv env: an in-memory key/value store, no database",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return kv.Run(cmd.Context(), kv.Config{Listen: listen, Stdio: stdio}, a.log)
		},
	}
	dbCmd := &cobra.Command{
		Use:   "db-mcp [--listen ADDR] [--database-url URL]",
		Short: "The db-mcp sidecar: read-only SQL over the service DB as MCP tools",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn == "" {
				dsn = os.Getenv("DATABASE_URL")
			}
			if dsn == "" {
				return usageError{"db-mcp needs --database-url or $DATABASE_URL"}
			}
			return dbmcp.Run(cmd.Context(), dbmcp.Config{Listen: listen, DatabaseURL: dsn}, a.log)
		},
	}
	dbCmd.Flags().StringVar(&dsn, "database-url", "", "PostgreSQL URL (default: $DATABASE_URL)")
	shopCmd := &cobra.Command{
		Use:   "shop [--listen ADDR] [--database-url URL]",
		Short: "The shop website of examples/shop: server-rendered pages over a catalogue and orders in the service DB",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn == "" {
				dsn = os.Getenv("DATABASE_URL")
			}
			if dsn == "" {
				return usageError{"shop needs --database-url or $DATABASE_URL"}
			}
			return shop.Run(cmd.Context(), shop.Config{Listen: listen, DatabaseURL: dsn}, a.log)
		},
	}
	shopCmd.Flags().StringVar(&dsn, "database-url", "", "PostgreSQL URL with search_path set to the shop's schema (default: $DATABASE_URL)")
	for _, c := range []*cobra.Command{notesCmd, kvCmd, dbCmd, shopCmd} {
		c.Flags().StringVar(&listen, "listen", ":8080", "address to serve HTTP on")
		if c != dbCmd && c != shopCmd {
			c.Flags().BoolVar(&stdio, "stdio", false, "serve MCP over stdin/stdout instead of HTTP")
		}
		cmd.AddCommand(c)
	}
	cmd.AddCommand(newServeAgentCmd(a))
	cmd.AddCommand(newServeEgressCmd(a), newServeEgressPolicyCmd())
	if schema == "" {
		schema = os.Getenv("DATABASE_SCHEMA")
	}
	return cmd
}

func newStdioBridgeCmd(a *app) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "stdio-bridge --listen HOST:PORT -- CMD [ARGS...]",
		Short: "Serve one stdio MCP server over streamable HTTP at /mcp",
		Long: `stdio-bridge starts CMD once and serves its MCP tools over streamable HTTP at /mcp, with
concurrent clients multiplexed onto the one child. A child that exits is reported (and /healthz
fails); it is not restarted.`,
		Example: `  agentenv stdio-bridge --listen 127.0.0.1:8081 -- npx -y @modelcontextprotocol/server-everything`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return stdiobridge.Run(cmd.Context(), stdiobridge.Options{
				Listen: listen, Command: args, Logger: a.log,
				Ready: func(addr string) { fmt.Fprintf(a.stderr, "stdio-bridge: serving %s at http://%s/mcp\n", args[0], addr) },
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8081", "address to serve HTTP on")
	return cmd
}

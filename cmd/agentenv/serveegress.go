package main

import (
	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/egressproxy"
)

// newServeEgressCmd serves the egress proxy of a Harbor task run with network_mode =
// "allowlist": the sandbox beside the task's, on its network with no route out and on one with.
func newServeEgressCmd(a *app) *cobra.Command {
	var cfg egressproxy.Config
	cmd := &cobra.Command{
		Use:   "egress-proxy --allow HOST,... [--listen ADDR]",
		Short: "An HTTP forward proxy (CONNECT and absolute http:// URIs) to the allowed hosts only",
		Long: `egress-proxy is the way out of a Harbor task run with network_mode = "allowlist": an HTTP
forward proxy that tunnels CONNECT host:port and forwards absolute http:// requests when the
host is in --allow (an exact name, *.NAME for NAME's subdomains only, case-insensitive; an IP
address or CIDR prefix, without which no IP literal passes), and answers anything else 403
with a one-line reason. Every decision is logged.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := egressproxy.ParseAllowlist(cfg.Allow); err != nil {
				return usageError{"--" + err.Error()}
			}
			return egressproxy.Run(cmd.Context(), cfg, a.log)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Listen, "listen", egressproxy.DefaultListen, "address to listen on")
	fl.StringSliceVar(&cfg.Allow, "allow", nil, "allowed hosts: NAME, *.NAME, an IP address or a CIDR prefix (comma-separated, repeatable)")
	fl.DurationVar(&cfg.DialTimeout, "dial-timeout", egressproxy.DefaultDialTimeout, "bound on each dial to a host")
	fl.DurationVar(&cfg.IdleTimeout, "idle-timeout", egressproxy.DefaultIdleTimeout, "close a tunnel or connection silent this long")
	fl.IntVar(&cfg.MaxConns, "max-conns", egressproxy.DefaultMaxConns, "client connections open at once")
	return cmd
}

package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/egressproxy"
)

// newServeEgressCmd serves the egress proxy of a Harbor task run with network_mode =
// "allowlist", or whose phases differ in network mode: the sandbox beside the task's, on its
// network with no route out and on one with.
func newServeEgressCmd(a *app) *cobra.Command {
	var cfg egressproxy.Config
	cmd := &cobra.Command{
		Use:   "egress-proxy --allow HOST,... [--any] [--policy-file FILE] [--listen ADDR]",
		Short: "An HTTP forward proxy (CONNECT and absolute http:// URIs) to the allowed hosts only",
		Long: `egress-proxy is the way out of a Harbor task run with network_mode = "allowlist": an HTTP
forward proxy that tunnels CONNECT host:port and forwards absolute http:// requests when the
host is in --allow (an exact name, *.NAME for NAME's subdomains only, case-insensitive; an IP
address or CIDR prefix, without which no IP literal passes), and answers anything else 403
with a one-line reason. Every decision is logged.

With --policy-file, the policy of each later phase of the task ('agentenv serve egress-policy'
writes it) replaces --allow and --any once written: requests are decided by it from then on,
and the tunnels and forwarded requests to hosts it does not allow are closed.`,
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
	fl.BoolVar(&cfg.Any, "any", false, "allow every host instead of --allow (a \"public\" phase of a task whose other phases are not)")
	fl.StringVar(&cfg.PolicyFile, "policy-file", "", "apply the policies 'agentenv serve egress-policy' writes to this file")
	fl.DurationVar(&cfg.DialTimeout, "dial-timeout", egressproxy.DefaultDialTimeout, "bound on each dial to a host")
	fl.DurationVar(&cfg.IdleTimeout, "idle-timeout", egressproxy.DefaultIdleTimeout, "close a tunnel or connection silent this long")
	fl.IntVar(&cfg.MaxConns, "max-conns", egressproxy.DefaultMaxConns, "client connections open at once")
	return cmd
}

// newServeEgressPolicyCmd changes the policy of a running egress proxy, between the phases of a
// Harbor task whose [agent] or [verifier] network_mode differs from its [environment]'s.
func newServeEgressPolicyCmd() *cobra.Command {
	var f struct {
		file string
		pol  egressproxy.Policy
		wait time.Duration
	}
	cmd := &cobra.Command{
		Use:   "egress-policy --file FILE [--allow HOST,...] [--any] [--wait D]",
		Short: "Set what a running egress proxy (--policy-file FILE) lets through, and wait until it does",
		Long: `egress-policy writes the policy of the next phase of a task to the --policy-file of the egress
proxy beside it, and returns once the proxy has applied it (the tunnels and forwarded requests
to hosts it no longer allows closed), or fails after --wait. --any allows every host (a
"public" phase); --allow the hosts listed (as egress-proxy's --allow); neither, none (a
"no-network" phase).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.file == "" {
				return usageError{"--file: name the proxy's --policy-file"}
			}
			if f.wait <= 0 {
				return usageError{"--wait: want a positive duration"}
			}
			if f.pol.Any && len(f.pol.Allow) > 0 {
				return usageError{"--any and --allow: give one of them"}
			}
			if _, err := egressproxy.ParseAllowlist(f.pol.Allow); err != nil {
				return usageError{"--" + err.Error()}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.wait)
			defer cancel()
			return egressproxy.WritePolicy(ctx, f.file, f.pol)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.file, "file", "", "the proxy's --policy-file")
	fl.StringSliceVar(&f.pol.Allow, "allow", nil, "allowed hosts: NAME, *.NAME, an IP address or a CIDR prefix (comma-separated, repeatable)")
	fl.BoolVar(&f.pol.Any, "any", false, "allow every host")
	fl.DurationVar(&f.wait, "wait", 30*time.Second, "bound on the wait until the proxy has applied it")
	return cmd
}

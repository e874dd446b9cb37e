package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/spf13/cobra"
)

// newResolveCmd is the name lookup agentenv's own images answer with: they are FROM scratch,
// with no getent, and a provider whose private network has no DNS for peers (Modal's i6pn)
// execs it in a sandbox to learn the address the sandbox's peers reach it at.
func newResolveCmd(a *app) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "resolve HOST",
		Short: "Print the addresses HOST resolves to, IPv6 first, one a line (as getent ahosts)",
		Long: `resolve looks HOST up with the system's resolver and prints each address on a line, IPv6
addresses first. It exits 2, as getent does, when HOST has no address. Providers run it inside
sandboxes of agentenv's own images, which have no getent.`,
		Example: `  agentenv resolve i6pn.modal.local`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", args[0])
			if err != nil || len(addrs) == 0 {
				return exitError{code: 2, msg: fmt.Sprintf("resolve %s: no address (%v)", args[0], err)}
			}
			// IPv6 first: a private network that resolves to both (i6pn) is reached over v6.
			slices.SortStableFunc(addrs, func(x, y netip.Addr) int {
				return cmp.Compare(y.Unmap().BitLen(), x.Unmap().BitLen())
			})
			for _, ad := range addrs {
				fmt.Fprintln(a.stdout, ad.Unmap())
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "give up after this long")
	return cmd
}

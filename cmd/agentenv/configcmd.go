package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newConfigCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Show the effective configuration"}
	var f struct{ json bool }
	show := &cobra.Command{
		Use:   "show [--json]",
		Short: "Print every setting, its value and where it came from (secrets masked)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			all := a.cfg.All()
			if f.json {
				return printJSON(a.stdout, all)
			}
			if a.cfg.File != "" {
				fmt.Fprintf(a.stdout, "config file: %s\n", a.cfg.File)
			} else {
				fmt.Fprintln(a.stdout, "config file: none (every default applies)")
			}
			rows := make([][]string, 0, len(all))
			for _, v := range all {
				val := v.Value
				if val == "" {
					val = "(unset)"
				}
				rows = append(rows, []string{v.Key, val, v.Source})
			}
			table(a.stdout, []string{"KEY", "VALUE", "SOURCE"}, rows)
			return nil
		},
	}
	show.Flags().BoolVar(&f.json, "json", false, "print JSON")
	cmd.AddCommand(show)
	return cmd
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run: func(*cobra.Command, []string) {
			v := "devel"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
				v = bi.Main.Version
			}
			fmt.Fprintln(a.stdout, "agentenv", v)
		},
	}
}

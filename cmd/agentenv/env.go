package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/envcheck"
	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/spec"
)

func newEnvCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "env", Short: "Validate, render, deploy and tear down environments"}
	cmd.AddCommand(newEnvSnapshotCmd(a))
	cmd.AddCommand(newEnvValidateCmd(a), newEnvRenderCmd(a), newEnvSchemaCmd(a),
		newEnvDeployCmd(a), newEnvLsCmd(a), newEnvGetCmd(a), newEnvTeardownCmd(a))
	return cmd
}

func newEnvValidateCmd(a *app) *cobra.Command {
	var f struct {
		url, token, part string
		json, readOnly   bool
	}
	cmd := &cobra.Command{
		Use:   "validate FILE | --url URL",
		Short: "Check an env file (errors name the file, line and field), or probe a running env server",
		Long: `validate FILE checks an env file. validate --url URL probes a running env server (or a
gateway) for the env protocol: its card at /.well-known/agent-env.json, its MCP tools, and a
data plane round trip (data/reset, data/add, data/get at the card's url; the data read first is
loaded back at the end; --read-only skips reset and add). Each check prints pass, warn, fail or
skip; any failure exits non-zero.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.url != "" {
				if len(args) > 0 {
					return usageError{"validate takes FILE or --url, not both"}
				}
				return validateURL(cmd, a, f.url, f.token, f.part, f.json, f.readOnly)
			}
			if len(args) != 1 {
				return usageError{"validate needs FILE or --url URL"}
			}
			env, err := spec.Load(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s: env %q is valid: %d server(s), %d website(s), service DB %v, digest %s\n",
				args[0], env.Name, len(env.Servers), len(env.Websites), env.ServiceDB != nil, env.Digest())
			return nil
		},
	}
	cmd.Flags().StringVar(&f.url, "url", "", "probe the env server (or gateway) at this URL")
	cmd.Flags().StringVar(&f.token, "token", "", "bearer token for --url (a gateway's admin token)")
	cmd.Flags().StringVar(&f.part, "part", "", "a JSON file holding the part data/add is probed with (default a text part)")
	cmd.Flags().BoolVar(&f.readOnly, "read-only", false, "with --url: skip data/reset and data/add")
	cmd.Flags().BoolVar(&f.json, "json", false, "with --url: print the report as JSON")
	return cmd
}

// validateURL runs envcheck on a running server and prints its report.
func validateURL(cmd *cobra.Command, a *app, url, token, partFile string, asJSON, readOnly bool) error {
	opts := envcheck.Options{Token: token, ReadOnly: readOnly}
	if partFile != "" {
		raw, err := os.ReadFile(partFile)
		if err != nil {
			return usageError{fmt.Sprintf("--part: %v", err)}
		}
		var p envproto.Part
		if err := json.Unmarshal(raw, &p); err != nil {
			return usageError{fmt.Sprintf("--part %s: %v", partFile, err)}
		}
		if err := p.Validate(); err != nil {
			return usageError{fmt.Sprintf("--part %s: %v", partFile, err)}
		}
		opts.Part = &p
	}
	rep, err := envcheck.Run(cmd.Context(), url, opts)
	if err != nil {
		return usageError{err.Error()}
	}
	if asJSON {
		err = printJSON(a.stdout, rep)
	} else {
		err = rep.Text(a.stdout)
	}
	if err != nil {
		return err
	}
	if !rep.OK {
		return exitError{code: exitFailed}
	}
	return nil
}

func newEnvRenderCmd(a *app) *cobra.Command {
	var f struct {
		compose bool
		binary  string
		project string
	}
	cmd := &cobra.Command{
		Use:   "render FILE --compose",
		Short: "Print the same stack as a docker compose file, for debugging and comparison",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if !f.compose {
				return usageError{"render needs a format: --compose"}
			}
			env, err := spec.Load(args[0])
			if err != nil {
				return err
			}
			if f.binary == "" {
				f.binary, _ = os.Executable()
			}
			out, err := spec.RenderCompose(env, spec.ComposeOptions{Project: f.project, AgentenvBinary: f.binary})
			if err != nil {
				return err
			}
			_, err = a.stdout.Write(out)
			return err
		},
	}
	cmd.Flags().BoolVar(&f.compose, "compose", false, "render a docker compose file")
	cmd.Flags().StringVar(&f.binary, "agentenv-binary", "", "host path of a static agentenv binary to mount into stdio servers (default: this one)")
	cmd.Flags().StringVar(&f.project, "project", "", "compose project name (default: the env's name)")
	return cmd
}

func newEnvSchemaCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of env files",
		RunE: func(*cobra.Command, []string) error {
			_, err := a.stdout.Write(spec.EnvSchema)
			return err
		},
	}
}

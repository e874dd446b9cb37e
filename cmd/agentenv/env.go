package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

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
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check an env file; errors name the file, line and field",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			env, err := spec.Load(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s: env %q is valid: %d server(s), service DB %v, digest %s\n",
				args[0], env.Name, len(env.Servers), env.ServiceDB != nil, env.Digest())
			return nil
		},
	}
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

package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/images"
	"github.com/agentenv/agentenv/provider/docker"
)

func newImagesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "images", Short: "Build the images agentenv runs, without a registry"}
	var tag string
	build := &cobra.Command{
		Use:   "build [--tag agentenv:dev]",
		Short: "Build the runtime image (FROM scratch + this static binary) on the local engine",
		Long: `build makes the image every Go component runs from (the gateway, the example servers,
db-mcp, the stdio bridge): FROM scratch plus this binary at /agentenv. The binary must be
static: CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' (without debug information it is a
third of the size, and so is every image upload to a VM). The PostgreSQL, DB web UI and Node
images are built by images/debian/build.sh in the repository.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, err := a.cfg.Get("provider.docker.host")
			if err != nil {
				return err
			}
			p, err := docker.New(docker.Config{Host: host}, a.log)
			if err != nil {
				return err
			}
			defer p.Close()
			start := time.Now()
			if err := images.BuildSelf(cmd.Context(), p.Client(), tag); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "built %s in %s\n", tag, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	build.Flags().StringVar(&tag, "tag", images.RuntimeTag, "image tag")
	cmd.AddCommand(build)
	return cmd
}

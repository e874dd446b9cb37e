// Command registry is the CNCF distribution registry (github.com/distribution/distribution/v3)
// for agentenv's integration tests: upstream's own command (`registry serve CONFIG`,
// `registry garbage-collect CONFIG`) with only the filesystem storage driver and the htpasswd
// access controller linked, and one command of ours:
//
//	registry htpasswd USER    reads a password on stdin, prints the htpasswd line USER:BCRYPT
//
// so that the tests write the registry's password file with the bcrypt the registry checks it
// with, and the product's go.mod needs no golang.org/x/crypto.
//
// It lives in a module of its own so that the registry's dependencies stay out of the product's
// go.mod. Build it with scripts/registry/build.sh; scripts/registry/up.sh and
// internal/registryserver start it.
//
// OpenTelemetry's span exporter defaults to OTLP on localhost, which nothing here serves: unless
// OTEL_TRACES_EXPORTER is set, it is set to "none" (as upstream's Docker image does).
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"
)

func main() {
	if _, set := os.LookupEnv("OTEL_TRACES_EXPORTER"); !set {
		_ = os.Setenv("OTEL_TRACES_EXPORTER", "none")
	}
	registry.RootCmd.AddCommand(&cobra.Command{
		Use:          "htpasswd <user>",
		Short:        "`htpasswd` reads a password on stdin and prints the htpasswd line user:bcrypt",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			line, err := htpasswd(args[0], bufio.NewReader(os.Stdin))
			if err != nil {
				return err
			}
			fmt.Println(line)
			return nil
		},
	})
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(2)
	}
}

// htpasswd returns the htpasswd line of user with the password read from the first line of r
// (its line ending dropped).
func htpasswd(user string, r *bufio.Reader) (string, error) {
	if user == "" || strings.ContainsAny(user, ":\r\n") {
		return "", fmt.Errorf("user %q: must be non-empty, without ':' or a line break", user)
	}
	pw, err := r.ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && pw != "") {
		return "", fmt.Errorf("read the password from stdin: %w", err)
	}
	pw = strings.TrimRight(pw, "\r\n")
	if pw == "" {
		return "", errors.New("empty password on stdin")
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.DefaultCost)
	if err != nil {
		return "", fmt.Errorf("bcrypt: %w", err)
	}
	return user + ":" + string(hash), nil
}

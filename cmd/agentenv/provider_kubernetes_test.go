package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/provider/kubernetes"
)

// TestKubernetesUnconfiguredSaysHowToConfigure runs the commands a new user tries with no
// cluster configured: each fails as bad input (exit 2), before contacting anything, naming the
// kubeconfig it did not read, the setting to set and the KUBECONFIG variable.
func TestKubernetesUnconfiguredSaysHowToConfigure(t *testing.T) {
	commands := [][]string{
		{"sandbox", "create", "--provider", "kubernetes", "--image", "img", "--", "true"},
		{"env", "deploy", filepath.Join("..", "..", "examples", "kv", "env.yaml"), "--provider", "kubernetes"},
	}
	for _, tt := range []struct {
		name, kubeconfigEnv, setting string
		want                         func() []string // computed once the environment is set
	}{
		{"nothing set", "", "", func() []string {
			return []string{kubernetes.DefaultKubeconfig(), kubeconfigKey, "AGENTENV_PROVIDER_KUBERNETES_KUBECONFIG", "env:KUBECONFIG"}
		}},
		{"KUBECONFIG set", "/elsewhere/kubeconfig", "", func() []string {
			return []string{"/elsewhere/kubeconfig", kubeconfigKey, "env:KUBECONFIG"}
		}},
		{"setting names an unset KUBECONFIG", "", "env:KUBECONFIG", func() []string {
			return []string{kubeconfigKey + " is env:KUBECONFIG", "does not resolve", kubernetes.DefaultKubeconfig()}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("AGENTENV_CONFIG", "")
			t.Setenv("XDG_STATE_HOME", t.TempDir())
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			t.Setenv("KUBECONFIG", tt.kubeconfigEnv)
			t.Setenv("AGENTENV_PROVIDER_KUBERNETES_KUBECONFIG", tt.setting)
			for _, args := range commands {
				var out, errOut bytes.Buffer
				if code := run(args, nil, &out, &errOut); code != exitBadInput {
					t.Errorf("%s: exit %d, want %d\n%s", strings.Join(args, " "), code, exitBadInput, &errOut)
				}
				for _, w := range append(tt.want(), "KUBECONFIG") {
					if !strings.Contains(errOut.String(), w) {
						t.Errorf("%s: the error does not name %q:\n%s", strings.Join(args, " "), w, &errOut)
					}
				}
				if strings.Contains(errOut.String(), `provider "kubernetes" is not configured`) {
					t.Errorf("%s: still the bare refusal:\n%s", strings.Join(args, " "), &errOut)
				}
			}
		})
	}
}

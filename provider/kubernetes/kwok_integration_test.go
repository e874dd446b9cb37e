//go:build integration && !e2e

package kubernetes_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/providertest"
)

// defaultNode is the simulated node scripts/kube/up.sh registers; there is no scheduler.
const defaultNode = "kwok-node-0"

// workload runs nothing real: kwok answers port-forwards to any Pod port with HTTP 200, and
// moves Pods whose first argument is agentenv-kwok-exit to Failed with the next as exit code.
var workload = providertest.Options{
	Image:       "agentenv-kwok:none", // never pulled: the node is simulated
	Command:     []string{"serve"},
	Port:        8080,
	ExitCommand: []string{"agentenv-kwok-exit", "3"},
	ExitCode:    3,
}

// unpullable is the image scripts/kube/up.sh's kwok keeps in ErrImagePull: a pinned image the
// node cannot pull.
const unpullable = "registry.agentenv.invalid/unpullable@sha256:0000000000000000000000000000000000000000000000000000000000000000"

// TestPinnedImage: a Pod of a pinned image runs it, logging in with the record's pull Secret;
// one the node cannot pull is patched to the image as named and runs that, the note saying
// why; Terminate removes the pull Secret with the rest.
func TestPinnedImage(t *testing.T) {
	p := newProvider(t, nil)
	cs := clientset(t, p)
	run := testRun()
	checkNoLeftovers(t, cs, map[string]string{agentenv.LabelRun: run})
	pullable := "127.0.0.1:5000/images/agentenv-kwok@sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		pinned, image, note string
	}{
		{pullable, pullable, "pulled " + pullable},
		{unpullable, workload.Image, "pull of " + unpullable + " failed (ErrImagePull: failed to pull and unpack image: unauthorized); running " + workload.Image},
	} {
		id := fmt.Sprintf("%s-%x", run, rand.Uint32())
		spec := agentenv.SandboxSpec{Name: id, Image: workload.Image, Pinned: c.pinned, Command: workload.Command, Ports: []int{workload.Port},
			PullAuth: &agentenv.RegistryAuth{Username: "u", Password: "p"}, Timeout: time.Minute,
			Labels: map[string]string{agentenv.LabelRecord: id, agentenv.LabelRun: run}}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		sb, err := p.Create(ctx, spec)
		cancel()
		if err != nil {
			t.Fatalf("pinned %s: Create: %v", c.pinned, err)
		}
		pod, err := cs.Pods(cluster(t).Namespace).Get(t.Context(), sb.ID, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := pod.Spec.Containers[0].Image; got != c.image || sb.ImageNote != c.note || sb.State != agentenv.SandboxRunning {
			t.Errorf("pinned %s: the Pod runs %s (%s), note %q; want %s, %q", c.pinned, got, sb.State, sb.ImageNote, c.image, c.note)
		}
		if len(pod.Spec.ImagePullSecrets) != 1 {
			t.Errorf("pinned %s: image pull secrets %v, want the record's", c.pinned, pod.Spec.ImagePullSecrets)
		} else if sec, err := cs.Secrets(pod.Namespace).Get(t.Context(), pod.Spec.ImagePullSecrets[0].Name, metav1.GetOptions{}); err != nil ||
			!strings.Contains(string(sec.Data[".dockerconfigjson"]), `"auth":"dTpw"`) {
			t.Errorf("pinned %s: pull secret %v (%v), want a Docker config logging in as u:p", c.pinned, sec, err)
		}
		if err := p.Terminate(t.Context(), sb.ID); err != nil {
			t.Errorf("Terminate: %v", err)
		}
	}
}

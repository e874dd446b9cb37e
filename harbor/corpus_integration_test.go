//go:build integration

package harbor

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// localImages maps the corpus's base images onto the images this machine has.
var localImages = map[string]string{"ubuntu:24.04": "agentenv-debian:bookworm", "postgres:16": "agentenv-postgres:local"}

// TestCorpusRuns runs every single-container corpus task on the engine as Harbor would: the
// environment built (FROM mapped to local images), tests/ at /tests and solution/ at
// /solution, the verifier under its user and env. Without the solution a good task scores 0,
// with it 1; the failing ones fail as their metadata's expect says. The compose task is left
// to TestComposeRuns, which runs it through the task runner (it needs a sidecar network).
func TestCorpusRuns(t *testing.T) {
	cli := dockertest.Require(t)
	labels := map[string]string{agentenv.LabelRun: "harbor-corpus-" + strconv.Itoa(os.Getpid())}
	dockertest.CheckNoLeftovers(t, cli, labels)
	dirs, err := Dataset("testdata/corpus", nil, []string{"compose-*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		task, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			expect, _ := task.Metadata["expect"].(string)
			img, err := buildEnv(ctx, t, cli, task, labels)
			if expect == "build_error" {
				if err == nil {
					t.Fatal("the environment built, want a build error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want0, want1 string
			switch expect {
			case "verifier_error":
				want0, want1 = "none", "none"
			case "":
				want0, want1 = "0", "1"
			case "agent_timeout":
				want0, want1 = "0", "0"
			default:
				t.Fatalf("unknown expect %q", expect)
			}
			if got := trial(ctx, t, cli, task, img, labels, false); got != want0 {
				t.Errorf("without the solution: reward %s, want %s", got, want0)
			}
			if got := trial(ctx, t, cli, task, img, labels, true); got != want1 {
				t.Errorf("with the solution: reward %s, want %s", got, want1)
			}
		})
	}
}

// buildEnv builds the task's environment/ (or returns its docker_image) with labels.
func buildEnv(ctx context.Context, t *testing.T, cli *client.Client, task *Task, labels map[string]string) (string, error) {
	if task.Environment.DockerImage != "" {
		return task.Environment.DockerImage, nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	root := filepath.Join(task.Dir, "environment")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "Dockerfile" {
			for from, to := range localImages {
				data = bytes.ReplaceAll(data, []byte("FROM "+from), []byte("FROM "+to))
			}
		}
		fi, _ := d.Info()
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("agentenv-harbor-corpus:%s-%d", filepath.Base(task.Dir), os.Getpid())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})
	bctx, cancel := context.WithTimeout(ctx, task.Environment.BuildTimeout)
	defer cancel()
	res, err := cli.ImageBuild(bctx, &buf, client.ImageBuildOptions{Tags: []string{tag}, Labels: labels, Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err == nil {
		err = engine.ReadBuild(res.Body)
		res.Body.Close()
	}
	return tag, err
}

// trial runs one container of img: each step's (or the task's) solution when solve, then its
// tests, and returns the last verifier's reward ("none" when it wrote none).
func trial(ctx context.Context, t *testing.T, cli *client.Client, task *Task, img string, labels map[string]string, solve bool) string {
	t.Helper()
	var env []string
	for k, v := range task.Environment.Env {
		env = append(env, k+"="+v)
	}
	host := &container.HostConfig{}
	if !task.Environment.AllowInternet {
		host.NetworkMode = "none"
	}
	made, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: img, Labels: labels, Env: env, Cmd: []string{"sleep", "infinity"}, User: "root"},
		HostConfig: host,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := made.ID
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	}()
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	type phase struct {
		dir      string // holds tests/ and solution/ (the step's, over the task's tests/)
		agent    Agent
		verifier Verifier
	}
	phases := []phase{{task.Dir, task.Agent, task.Verifier}}
	if len(task.Steps) > 0 {
		phases = nil
		for _, s := range task.Steps {
			phases = append(phases, phase{s.Dir, s.Agent, s.Verifier})
		}
	}
	reward := "none"
	for _, ph := range phases {
		run(ctx, t, cli, id, "root", nil, 0, "rm -rf /tests /solution /logs/verifier && mkdir -p /tests /solution /logs/verifier && chmod 777 /logs/verifier")
		copyIn(ctx, t, cli, id, filepath.Join(task.Dir, "tests"), "/tests")
		copyIn(ctx, t, cli, id, filepath.Join(ph.dir, "tests"), "/tests")
		copyIn(ctx, t, cli, id, filepath.Join(ph.dir, "solution"), "/solution")
		if solve {
			var senv []string
			for k, v := range task.Solution.Env {
				senv = append(senv, k+"="+v)
			}
			run(ctx, t, cli, id, ph.agent.User, senv, ph.agent.Timeout, "bash /solution/solve.sh")
		}
		var venv []string
		for k, v := range ph.verifier.Env {
			venv = append(venv, k+"="+v)
		}
		run(ctx, t, cli, id, ph.verifier.User, venv, ph.verifier.Timeout, "bash /tests/test.sh")
		reward = strings.TrimSpace(run(ctx, t, cli, id, "root", nil, 0, "cat /logs/verifier/reward.txt 2>/dev/null || cat /logs/verifier/reward.json 2>/dev/null || echo none"))
		if strings.HasPrefix(reward, "{") {
			reward = strings.TrimSpace(strings.SplitN(strings.SplitN(reward, `"reward":`, 2)[1], ",", 2)[0])
		}
	}
	return reward
}

// run runs a shell command in the container as user, cut at timeout (0: none) as Harbor cuts
// an agent or verifier, and returns its stdout.
func run(ctx context.Context, t *testing.T, cli *client.Client, id, user string, env []string, timeout time.Duration, cmd string) string {
	t.Helper()
	if timeout > 0 {
		cmd = fmt.Sprintf("timeout %.3f sh -c %s", timeout.Seconds(), strconv.Quote(cmd))
	}
	ex, err := cli.ExecCreate(ctx, id, client.ExecCreateOptions{AttachStdout: true, AttachStderr: true, User: user, Env: env, Cmd: []string{"sh", "-c", cmd}})
	if err != nil {
		t.Fatal(err)
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	var out, errOut bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errOut, att.Reader); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// copyIn copies the folder src (if it exists) into dst in the container.
func copyIn(ctx context.Context, t *testing.T, cli *client.Client, id, src, dst string) {
	t.Helper()
	if _, err := os.Stat(src); err != nil {
		return
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.AddFS(os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: dst, Content: io.Reader(&buf)}); err != nil {
		t.Fatal(err)
	}
}

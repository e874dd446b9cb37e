package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// Names of the Harbor measures.
const (
	HarborEpisodeAgentenv = "harbor episode (agentenv, image cached)"
	HarborEpisodeByHand   = "harbor episode (by hand)"
	HarborCorpusCold      = "harbor corpus cold"
	HarborCorpusWarm      = "harbor corpus warm"
)

// Where the Harbor measures find their tasks, relative to the checkout.
const (
	HarborTask   = "harbor/testdata/corpus/hello-file" // the task of the episode measure
	HarborCorpus = "harbor/testdata/corpus"            // the dataset of the corpus measures
)

// HarborFailing are the corpus's tasks that fail `agentenv tasks check` on purpose; any other
// failing task is a problem of the run.
func HarborFailing() []string { return []string{"agent-timeout", "build-error", "verifier-no-reward"} }

// DefaultImageMap maps the corpus's base images onto the local ones this machine has, as
// `--image-map FROM=TO` takes them.
func DefaultImageMap() []string {
	return []string{"ubuntu:24.04=agentenv-debian:bookworm", "postgres:16=agentenv-postgres:local"}
}

// Bounds of the Harbor measures' commands.
const (
	harborEpisodeTimeout = 5 * time.Minute  // one `agentenv run` of the task, the first one building
	harborCorpusTimeout  = 20 * time.Minute // one `agentenv tasks check` of the corpus, cold
)

// CorpusFigure is one `agentenv tasks check` of the corpus.
type CorpusFigure struct {
	Cache        string        `json:"cache"` // "cold": every build image torn down before; "warm": right after
	Wall         time.Duration `json:"wall_ns"`
	Group        string        `json:"group"`
	Tasks        int           `json:"tasks"`
	Failing      []string      `json:"failing"`       // tasks the check failed, HarborFailing on purpose
	Builds       int           `json:"builds"`        // images built: build records made live during the check
	FailedBuilds int           `json:"failed_builds"` // builds that failed: build records made during the check and not live
}

// harbor measures one Harbor task's episode through `agentenv run` against the same steps
// with the docker CLI, alternately, on the image agentenv built; then `agentenv tasks check`
// of the corpus with no build image (cold), and again (warm). It removes every build image it
// made, and every container of the by-hand episodes, at the end.
func (b *bencher) harbor(ctx context.Context) {
	ae := Measure{Name: HarborEpisodeAgentenv, Note: "whole `agentenv run` process: build check, create, upload, solve, upload, test, reward, verified teardown, ledger"}
	bh := Measure{Name: HarborEpisodeByHand, Note: "docker run -d, cp, exec solve.sh, cp, exec test.sh, exec cat reward.txt, rm -f"}
	cold := Measure{Name: HarborCorpusCold, Note: "agentenv tasks check of the corpus, every build image torn down before"}
	warm := Measure{Name: HarborCorpusWarm, Note: "agentenv tasks check of the corpus again, its images built"}
	defer func() {
		for _, m := range []Measure{ae, bh, cold, warm} {
			b.res.add(m)
		}
	}()
	if b.cfg.RepoDir == "" {
		const why = "run from a checkout of agentenv (the tasks are its harbor/testdata/corpus)"
		ae.Skipped, bh.Skipped, cold.Skipped, warm.Skipped = why, why, why, why
		return
	}
	defer func() {
		if err := b.removeBuilds(ctx); err != nil {
			b.problem("harbor: remove the build images: %v", err)
		}
	}()
	b.harborEpisodes(ctx, &ae, &bh)
	for _, c := range []struct {
		m     *Measure
		cache string
	}{{&cold, "cold"}, {&warm, "warm"}} {
		if ctx.Err() != nil {
			return
		}
		if c.cache == "cold" {
			if err := b.removeBuilds(ctx); err != nil {
				b.problem("harbor corpus: empty the build cache: %v", err)
				return
			}
		}
		f, err := b.harborCorpus(ctx, c.cache)
		if err != nil {
			b.problem("harbor corpus %s: %v", c.cache, err)
			return
		}
		c.m.Samples = append(c.m.Samples, f.Wall)
		b.res.Harbor = append(b.res.Harbor, f)
	}
}

// imageMapArgs are the --image-map flags of the Harbor commands.
func (b *bencher) imageMapArgs() []string {
	var args []string
	for _, m := range b.cfg.ImageMap {
		args = append(args, "--image-map", m)
	}
	return args
}

// runOutput is the part of `agentenv run --json` the episode measure reads.
type runOutput struct {
	Episodes []struct {
		Run     string `json:"run"`
		Outcome string `json:"outcome"`
		Steps   []struct {
			ID      string            `json:"id"`
			Outputs map[string]string `json:"outputs"`
		} `json:"steps"`
	} `json:"episodes"`
}

// harborRun runs `agentenv run HarborTask --agent oracle` and returns its time and the image
// and built outputs of its container step. An episode that did not pass is an error.
func (b *bencher) harborRun(ctx context.Context) (took time.Duration, image string, built bool, err error) {
	args := append([]string{"run", filepath.Join(b.cfg.RepoDir, HarborTask), "--agent", "oracle", "--json"}, b.imageMapArgs()...)
	r, err := b.agentenv(ctx, harborEpisodeTimeout, args...)
	if err != nil {
		return 0, "", false, err
	}
	var out runOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		return 0, "", false, fmt.Errorf("agentenv run --json: %w", err)
	}
	if len(out.Episodes) != 1 || out.Episodes[0].Outcome != "passed" {
		return 0, "", false, fmt.Errorf("agentenv run %s: want one passed episode: %s", HarborTask, tail(r.stdout, 400))
	}
	for _, s := range out.Episodes[0].Steps {
		if s.ID == "container" {
			image, built = s.Outputs["image"], s.Outputs["built"] == "true"
		}
	}
	if image == "" {
		return 0, "", false, fmt.Errorf("agentenv run %s: no image output on its container step", HarborTask)
	}
	return r.took, image, built, nil
}

// harborEpisodes builds the task's image with a first, unmeasured run, then alternates the
// measured runs through agentenv with the same steps by hand.
func (b *bencher) harborEpisodes(ctx context.Context, ae, bh *Measure) {
	_, image, _, err := b.harborRun(ctx)
	if err != nil {
		b.problem("harbor episode, first run (builds the image): %v", err)
		return
	}
	label := fmt.Sprintf("agentenv.bench=%x", rand.Uint32())
	defer func() {
		lctx, cancel := cleanup.Context(ctx, time.Minute)
		defer cancel()
		k, v, _ := strings.Cut(label, "=")
		if rs, err := b.cfg.Engine.List(lctx, map[string]string{k: v}); err != nil || len(rs) > 0 {
			b.problem("harbor episode by hand left %v (%v)", rs, err)
			_ = b.cfg.Engine.RemoveAll(lctx, map[string]string{k: v})
		}
	}()
	for range b.cfg.Reps {
		if ctx.Err() != nil {
			return
		}
		took, _, built, err := b.harborRun(ctx)
		if err != nil {
			b.problem("harbor episode: %v", err)
			return
		}
		if built {
			b.problem("harbor episode: agentenv built the image again, which the first run had built")
		}
		ae.Samples = append(ae.Samples, took)
		took, err = b.harborByHand(ctx, image, label)
		if err != nil {
			b.problem("harbor episode by hand: %v", err)
			return
		}
		bh.Samples = append(bh.Samples, took)
	}
}

// harborByHand runs the episode's steps with the docker CLI on image and returns their time:
// a container, the solution copied in and run, the tests copied in and run, the reward read,
// the container removed. A reward other than 1 is an error.
func (b *bencher) harborByHand(ctx context.Context, image, label string) (time.Duration, error) {
	task := filepath.Join(b.cfg.RepoDir, HarborTask)
	start := time.Now()
	r, err := b.exec(ctx, shortTimeout, nil, "docker", "run", "-d", "--label", label, image, "sleep", "infinity")
	if err != nil {
		return 0, err
	}
	id := strings.TrimSpace(r.stdout)
	removed := false
	defer func() {
		if !removed {
			_, _ = b.exec(cleanup.Unbounded(ctx), shortTimeout, nil, "docker", "rm", "-f", id)
		}
	}()
	steps := [][]string{
		{"cp", filepath.Join(task, "solution") + "/.", id + ":/solution"},
		{"exec", id, "bash", "/solution/solve.sh"},
		{"cp", filepath.Join(task, "tests") + "/.", id + ":/tests"},
		{"exec", id, "bash", "/tests/test.sh"},
		{"exec", id, "cat", "/logs/verifier/reward.txt"},
	}
	for _, s := range steps {
		if r, err = b.exec(ctx, shortTimeout, nil, "docker", s...); err != nil {
			return 0, err
		}
	}
	reward := strings.TrimSpace(r.stdout)
	if _, err := b.exec(cleanup.Unbounded(ctx), shortTimeout, nil, "docker", "rm", "-f", id); err != nil {
		return 0, err
	}
	removed = true
	took := time.Since(start)
	if reward != "1" {
		return 0, fmt.Errorf("reward %q, want 1", reward)
	}
	return took, nil
}

// checkOutput is the part of `agentenv tasks check --json` the corpus measure reads.
type checkOutput struct {
	Group string `json:"group"`
	Rows  []struct {
		Task    string `json:"task"`
		Problem string `json:"problem"`
	} `json:"rows"`
}

// harborCorpus runs `agentenv tasks check` of the corpus once and counts the builds it did
// from the ledger's build records made meanwhile. Tasks failing other than HarborFailing are a
// problem of the run, not an error.
func (b *bencher) harborCorpus(ctx context.Context, cache string) (CorpusFigure, error) {
	args := append([]string{"tasks", "check", filepath.Join(b.cfg.RepoDir, HarborCorpus),
		"--concurrency", "4", "--json"}, b.imageMapArgs()...)
	since := time.Now()
	r, err := b.agentenv(ctx, harborCorpusTimeout, args...)
	// tasks check exits 1 when any task fails, as some do on purpose.
	if ee := (*exec.ExitError)(nil); err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return CorpusFigure{}, err
	}
	var out checkOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Rows) == 0 {
		return CorpusFigure{}, fmt.Errorf("agentenv tasks check --json: %d rows (%v): %s", len(out.Rows), err, tail(r.stdout+r.stderr, 400))
	}
	f := CorpusFigure{Cache: cache, Wall: r.took, Group: out.Group, Tasks: len(out.Rows), Failing: []string{}}
	for _, row := range out.Rows {
		if row.Problem != "" {
			f.Failing = append(f.Failing, row.Task)
			if !slices.Contains(HarborFailing(), row.Task) {
				b.problem("harbor corpus %s: %s failed: %s", cache, row.Task, row.Problem)
			}
		}
	}
	for _, want := range HarborFailing() {
		if !slices.Contains(f.Failing, want) {
			b.problem("harbor corpus %s: %s passed, though it fails on purpose", cache, want)
		}
	}
	recs, err := b.buildRecords(ctx, true)
	if err != nil {
		return f, err
	}
	for _, rec := range recs {
		if rec.Created.Before(since) {
			continue
		}
		if rec.State == agentenv.StateLive {
			f.Builds++
		} else {
			f.FailedBuilds++
		}
	}
	return f, nil
}

// buildRecords lists the bench ledger's image records of role build, gone ones too if all.
func (b *bencher) buildRecords(ctx context.Context, all bool) ([]agentenv.Record, error) {
	args := []string{"ledger", "ls", "--json"}
	if all {
		args = append(args, "--all")
	}
	r, err := b.agentenv(ctx, shortTimeout, args...)
	if err != nil {
		return nil, err
	}
	var recs []agentenv.Record
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil {
		return nil, fmt.Errorf("agentenv ledger ls --json: %w", err)
	}
	return slices.DeleteFunc(recs, func(rec agentenv.Record) bool {
		return rec.Kind != agentenv.KindImage || rec.Role != agentenv.RoleBuild
	}), nil
}

// removeBuilds tears down every build image of the bench's ledger that is not gone, through
// the ledger (`agentenv sandbox rm`, a verified receipt each), and checks that the engine no
// longer has them.
func (b *bencher) removeBuilds(ctx context.Context) error {
	ctx = cleanup.Unbounded(ctx)
	recs, err := b.buildRecords(ctx, false)
	if err != nil {
		return err
	}
	var errs []error
	for _, rec := range recs {
		if rec.State == agentenv.StateGone {
			continue
		}
		if _, err := b.agentenv(ctx, shortTimeout, "sandbox", "rm", rec.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		if ref := rec.Attrs["image.ref"]; ref != "" {
			if _, err := b.exec(ctx, shortTimeout, nil, "docker", "image", "inspect", ref); err == nil {
				errs = append(errs, fmt.Errorf("build image %s (record %s) is still on the engine after its teardown", ref, rec.ID))
			}
		}
	}
	return errors.Join(errs...)
}

package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/task"
)

// engineTimeout bounds one call to the engine.
const engineTimeout = 30 * time.Second

// settle is how long a round waits after its processes exit before it counts, so that a
// container whose create was still in flight in the engine shows up in the count.
const settle = 2 * time.Second

// child is a running agentenv process of a round.
type child struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	log    *os.File
	warns  *liveClassifier
	exited chan struct{}
	owner  string // its agentenv.owner label
}

// start runs the agentenv binary with args in its own process group (so that only soak signals
// it), its stdout kept and its stderr written to logPath, its teardown warnings classified as
// they are written (source names the process in them).
func (s *soaker) start(source, logPath string, args ...string) (*child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c := &child{log: logf, exited: make(chan struct{}), warns: newLiveClassifier(source, s.cfg.Engine, logf)}
	c.cmd = exec.Command(s.cfg.Binary, args...)
	c.cmd.Env = append(append([]string(nil), s.cfg.Env...), "XDG_STATE_HOME="+s.state)
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, c.warns
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		_, _ = c.warns.wait()
		return nil, fmt.Errorf("start %s: %w", s.cfg.Binary, err)
	}
	if o, err := lifecycle.OwnerOf(c.cmd.Process.Pid); err == nil {
		c.owner = o.String()
	}
	go func() {
		_ = c.cmd.Wait()
		logf.Close()
		close(c.exited)
	}()
	if err != nil {
		c.kill()
		_, _ = c.warns.wait()
		return nil, fmt.Errorf("owner of the runner: %w", err)
	}
	return c, nil
}

func (c *child) signal(sig syscall.Signal) { _ = c.cmd.Process.Signal(sig) }

// kill sends SIGKILL and waits (bounded) for the exit.
func (c *child) kill() {
	c.signal(syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
	}
}

// wait waits until the child exits or d passes and reports whether it exited.
func (c *child) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.exited:
		return true
	case <-t.C:
		return false
	}
}

// code returns the exit code, -1 when the process was killed by a signal.
func (c *child) code() int {
	if c.cmd.ProcessState == nil {
		return -1
	}
	return c.cmd.ProcessState.ExitCode()
}

// round runs one round and counts what it left.
func (s *soaker) round(ctx context.Context, n int, kind Kind) (r Round) {
	start := time.Now()
	r = Round{Number: n, Kind: kind, Episodes: s.cfg.Episodes, ExitCode: -1, Leftovers: []string{}, Warnings: []Warning{}}
	defer func() { r.Elapsed = time.Since(start) }()
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }

	args := []string{"--ledger", filepath.Join(s.cfg.Dir, "ledger.bolt"), "--log-level", "warn",
		"run", s.task, "--k", strconv.Itoa(s.cfg.Episodes), "--concurrency", strconv.Itoa(s.cfg.Episodes), "--json"}
	if s.cfg.Provider != "" {
		args = append(args, "--provider", s.cfg.Provider)
	}
	runLog := filepath.Join(s.cfg.Dir, fmt.Sprintf("round-%d-%s.log", n, kind))
	c, err := s.start("run", runLog, args...)
	if err != nil {
		problem("runner did not start: %v", err)
		return r
	}
	r.Owner = c.owner
	mem := StartMemPeak(250 * time.Millisecond)
	labels := map[string]string{agentenv.LabelOwner: c.owner}
	w := newWatcher(s.cfg.Engine, labels)
	go w.run(c.exited)

	deadline := start.Add(s.cfg.RoundTimeout)
	if kind != Steady {
		s.inject(ctx, &r, kind, c, w, deadline)
	}
	s.await(ctx, &r, c, deadline)
	<-w.done
	r.Load.MachinePeak, r.Load.MachineBase = mem.Stop(), mem.Base
	r.Load.RunnerPeak = MaxRSS(c.cmd.ProcessState)
	r.ExitCode = c.code()
	if err := w.failure(); err != nil {
		problem("engine: %v", err)
	}
	s.tally(&r, c.stdout.Bytes(), w)
	s.warnings(&r, c)

	if kind == Crash {
		s.gc(&r, n)
	}
	time.Sleep(settle)
	s.count(&r, labels, w.seenPorts())
	if len(r.Leftovers) > 0 && !s.cfg.KeepLeftovers {
		s.removeLeftovers(&r, labels, w.seenPorts())
	}
	return r
}

// inject waits until the round is under way (half of the episodes have had a running
// container, and some have one now), then does what kind says.
func (s *soaker) inject(ctx context.Context, r *Round, kind Kind, c *child, w *watcher, deadline time.Time) {
	want := max(1, s.cfg.Episodes/2)
	if !w.waitStarted(ctx, want, c.exited, deadline) {
		if ctx.Err() == nil {
			r.Injected = append(r.Injected, fmt.Sprintf("nothing: the runner exited or the deadline passed before %d episodes had had a running container", want))
		}
		return
	}
	// A little later than the first moment, so that some episodes are past their deploy.
	time.Sleep(time.Duration(s.rnd.Int64N(int64(1500 * time.Millisecond))))
	switch kind {
	case Kill:
		s.kill(ctx, r, w, c.exited, deadline)
	case Interrupt:
		c.signal(syscall.SIGINT)
		r.Injected = append(r.Injected, fmt.Sprintf("SIGINT to the runner (pid %d) with %d episodes under way", c.cmd.Process.Pid, w.runningRuns()))
	case Crash:
		c.signal(syscall.SIGKILL)
		r.Injected = append(r.Injected, fmt.Sprintf("SIGKILL to the runner (pid %d) with %d episodes under way", c.cmd.Process.Pid, w.runningRuns()))
	}
}

// kill removes or kills one running container of a quarter of the episodes, behind agentenv's
// back: even victims are killed (docker kill), odd ones removed (docker rm -f). Under admission
// control only a few episodes are under way at once, and with a state store each lasts seconds,
// so it goes on through the round, from a fresh listing each time, until a quarter of the
// episodes have lost a container or the runner exits: a container that ended before the kill
// reached it is a miss, not a hit, and the next victim is drawn.
func (s *soaker) kill(ctx context.Context, r *Round, w *watcher, exited <-chan struct{}, deadline time.Time) {
	want := max(1, s.cfg.Episodes/4)
	hit := map[string]bool{}
	misses := 0
	for len(hit) < want {
		w.poll()
		var runs []string
		byRun := w.running()
		for run := range byRun {
			if !hit[run] {
				runs = append(runs, run)
			}
		}
		slices.Sort(runs)
		if len(runs) > 0 {
			run := runs[s.rnd.IntN(len(runs))]
			cs := byRun[run]
			v := cs[s.rnd.IntN(len(cs))]
			cctx, cancel := cleanup.Context(ctx, engineTimeout)
			verb, err := "killed", error(nil)
			if len(hit)%2 == 0 {
				err = s.cfg.Engine.Kill(cctx, v.ID)
			} else {
				verb, err = "removed", s.cfg.Engine.Remove(cctx, v.ID)
			}
			cancel()
			if err != nil {
				misses++
			} else {
				hit[run] = true
				r.Hit = append(r.Hit, run)
				r.Injected = append(r.Injected, fmt.Sprintf("%s container %s (%s) of run %s", verb, v.Name, v.Labels[agentenv.LabelRole], run))
			}
		}
		// Spread the kills over the round.
		select {
		case <-exited:
		case <-ctx.Done():
		case <-time.After(time.Until(deadline)):
		case <-time.After(time.Duration(s.rnd.Int64N(int64(500 * time.Millisecond)))):
			continue
		}
		break
	}
	if misses > 0 {
		r.Injected = append(r.Injected, fmt.Sprintf("%d victims had ended before the kill reached them; others were drawn", misses))
	}
	if len(hit) < want {
		r.Injected = append(r.Injected, fmt.Sprintf("%d of the %d episodes meant to lose a container did: the runner exited first", len(hit), want))
	}
}

// await waits for the runner to exit: until the round's deadline, and after an interrupt (by
// the round or by ctx) for the stop timeout. A runner that does not exit in time is a problem;
// it gets a second SIGINT (stop waiting), then SIGKILL.
func (s *soaker) await(ctx context.Context, r *Round, c *child, deadline time.Time) {
	select {
	case <-c.exited:
		return
	case <-ctx.Done():
		c.signal(syscall.SIGINT)
		r.Injected = append(r.Injected, "SIGINT to the runner: the soak itself was interrupted")
		deadline = time.Now().Add(s.cfg.StopTimeout)
	case <-time.After(time.Until(deadline)):
		r.Problems = append(r.Problems, fmt.Sprintf("runner still running at the round's deadline (%s); sent SIGINT", s.cfg.RoundTimeout))
		c.signal(syscall.SIGINT)
		deadline = time.Now().Add(s.cfg.StopTimeout)
	}
	if c.wait(time.Until(deadline)) {
		return
	}
	r.Problems = append(r.Problems, fmt.Sprintf("runner did not exit within %s of SIGINT; sent a second SIGINT, then SIGKILL", s.cfg.StopTimeout))
	c.signal(syscall.SIGINT)
	if !c.wait(30 * time.Second) {
		c.kill()
	}
}

// tally reads the runner's JSON summary, if it printed one, and records episodes that should
// have passed and did not: every episode of a steady round, and the episodes of a kill round
// that lost no sandbox.
func (s *soaker) tally(r *Round, stdout []byte, w *watcher) {
	switch {
	case r.Kind == Steady && r.ExitCode != 0:
		r.Problems = append(r.Problems, fmt.Sprintf("runner exited %d", r.ExitCode))
	case r.Kind == Interrupt && r.ExitCode != 130 && r.ExitCode != 0 && r.ExitCode != 1:
		r.Problems = append(r.Problems, fmt.Sprintf("interrupted runner exited %d, want 130", r.ExitCode))
	}
	if r.Kind == Crash {
		return
	}
	var sum task.Summary
	if err := json.Unmarshal(stdout, &sum); err != nil {
		if len(stdout) > 0 || r.Kind != Interrupt {
			r.Problems = append(r.Problems, fmt.Sprintf("runner printed no summary: %v", err))
		}
		return
	}
	r.Load.deployFigures(sum)
	hit := map[string]bool{}
	for _, h := range r.Hit {
		hit[h] = true
	}
	bad, firstErr := 0, ""
	for _, ep := range sum.Episodes {
		switch ep.Outcome {
		case task.OutcomePassed, task.OutcomeUnscored:
			r.Passed++
			continue
		case task.OutcomeCancelled:
			r.Cancelled++
		default:
			r.Failed++
		}
		if r.Kind == Steady || (r.Kind == Kill && !hit[ep.Run]) {
			bad++
			if firstErr == "" {
				firstErr = fmt.Sprintf("%s %s: %s", ep.Run, ep.Outcome, strings.ReplaceAll(ep.Error, "\n", "; "))
			}
		}
	}
	if bad > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d of %d episodes that nothing disturbed did not pass; first: %s", bad, len(sum.Episodes), firstErr))
	}
}

// warnings collects the teardown warnings a process logged, classified as they were written.
func (s *soaker) warnings(r *Round, c *child) {
	ws, err := c.warns.wait()
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
	}
	r.Warnings = append(r.Warnings, ws...)
}

// gc runs `agentenv gc` on the soak's ledger, bounded, as a user would after a crash: again,
// a few seconds later, while it reports creates of the dead runner that may still be in flight
// in the engine (what they make appears only after the first pass), at most gcPasses times.
func (s *soaker) gc(r *Round, n int) {
	for pass := 1; pass <= gcPasses; pass++ {
		inFlight, ok := s.gcPass(r, n, pass)
		if !ok || inFlight == 0 {
			return
		}
		time.Sleep(gcPause)
	}
}

// gcPasses and gcPause bound the gc passes after a crash.
const (
	gcPasses = 4
	gcPause  = 5 * time.Second
)

// gcPass runs one gc and returns how many creates it reported still in flight.
func (s *soaker) gcPass(r *Round, n, pass int) (inFlight int, ok bool) {
	logPath := filepath.Join(s.cfg.Dir, fmt.Sprintf("round-%d-gc-%d.log", n, pass))
	c, err := s.start("gc", logPath, "--ledger", filepath.Join(s.cfg.Dir, "ledger.bolt"), "--log-level", "warn", "gc", "--json")
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("gc did not start: %v", err))
		return 0, false
	}
	if !c.wait(s.cfg.GCTimeout) {
		r.Problems = append(r.Problems, fmt.Sprintf("gc did not finish within %s; killed", s.cfg.GCTimeout))
		c.kill()
	}
	code := c.code()
	r.GCExit = &code
	if code != 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("gc exited %d", code))
	}
	summary, inFlight := summarizeGC(c.stdout.Bytes())
	r.Injected = append(r.Injected, fmt.Sprintf("agentenv gc (pass %d): %s", pass, summary))
	s.warnings(r, c)
	return inFlight, code == 0
}

// summarizeGC says how many sandboxes a gc --json report collected, and returns how many
// creates it reported still in flight.
func summarizeGC(out []byte) (string, int) {
	var rep struct {
		Actions  []struct{ Outcome string } `json:"actions"`
		Errors   []string                   `json:"errors"`
		InFlight []string                   `json:"in_flight"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return "printed no report", 0
	}
	s := fmt.Sprintf("collected %d", len(rep.Actions))
	if len(rep.InFlight) > 0 {
		s += fmt.Sprintf(", %d creates still in flight", len(rep.InFlight))
	}
	if len(rep.Errors) > 0 {
		s += fmt.Sprintf(", %d errors (first: %s)", len(rep.Errors), rep.Errors[0])
	}
	return s, len(rep.InFlight)
}

// count lists, from the engine and the file system, what the round left: containers, networks
// and volumes with its owner label, work folders, and host ports its containers published that
// something still listens on.
func (s *soaker) count(r *Round, labels map[string]string, ports []int) {
	ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
	defer cancel()
	rs, err := s.cfg.Engine.List(ctx, labels)
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("count leftovers: %v", err))
	}
	for _, res := range rs {
		r.Leftovers = append(r.Leftovers, res.String())
	}
	dir := filepath.Join(s.state, "agentenv", "sandboxes")
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		r.Problems = append(r.Problems, fmt.Sprintf("count work folders: %v", err))
	}
	for _, e := range entries {
		r.Leftovers = append(r.Leftovers, "folder "+filepath.Join(dir, e.Name()))
	}
	listening, err := listeningPorts()
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
	}
	for _, p := range ports {
		if listening[p] {
			r.Leftovers = append(r.Leftovers, "port "+strconv.Itoa(p))
		}
	}
}

// removeLeftovers removes what count found, so that the next round starts clean, and counts
// again: Removed lists only what is gone now, and what is still there is a problem of the round
// (an engine can keep a network whose removal failed; the report must not say it was removed).
func (s *soaker) removeLeftovers(r *Round, labels map[string]string, ports []int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*engineTimeout)
	defer cancel()
	if err := s.cfg.Engine.RemoveAll(ctx, labels); err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("remove leftovers: %v", err))
	}
	if err := os.RemoveAll(filepath.Join(s.state, "agentenv", "sandboxes")); err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("remove work folders: %v", err))
	}
	var again Round
	s.count(&again, labels, ports)
	r.Problems = append(r.Problems, again.Problems...)
	still := map[string]bool{}
	for _, l := range again.Leftovers {
		still[l] = true
	}
	var kept []string
	for _, l := range r.Leftovers {
		if still[l] {
			kept = append(kept, l)
		} else {
			r.Removed = append(r.Removed, l)
		}
	}
	if len(kept) > 0 {
		r.Problems = append(r.Problems, "soak could not remove what was left: "+strings.Join(kept, ", "))
	}
}

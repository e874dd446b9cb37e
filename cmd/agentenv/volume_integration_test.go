//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// TestHarborVolumeSIGKILLThenGC: `agentenv run` of the corpus's compose-volume task is killed
// (SIGKILL) as soon as its named volume exists on the engine; `agentenv gc` then removes the
// volume and whatever else the run had made: nothing labelled with the run is left, and no
// record of the ledger is short of gone.
func TestHarborVolumeSIGKILLThenGC(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	c.env = append(c.env, "AGENTENV_LIFECYCLE_CREATE_TIMEOUT=20s")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := c.cmd(ctx, nil, "run", "../../harbor/testdata/corpus/compose-volume", "--agent", "oracle")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	// The volume of this process: its step's role, and this process as its owner.
	mine := "/" + strconv.Itoa(cmd.Process.Pid) + "/"
	filter := make(client.Filters).Add("label", agentenv.LabelRole+"=task:vol_shared")
	run := ""
	for run == "" {
		select {
		case <-done:
			t.Fatal("agentenv run ended before its volume was listed")
		case <-ctx.Done():
			t.Fatal("agentenv run made no volume within 3 minutes")
		case <-time.After(10 * time.Millisecond):
		}
		vols, err := c.dc.VolumeList(ctx, client.VolumeListOptions{Filters: filter})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols.Items {
			if strings.Contains(v.Labels[agentenv.LabelOwner], mine) {
				run = v.Labels[agentenv.LabelRun]
			}
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	byRun := map[string]string{agentenv.LabelRun: run}
	if left, err := dockertest.Leftovers(t.Context(), c.dc, byRun); err != nil || !strings.Contains(strings.Join(left, ","), "volume ") {
		t.Fatalf("after the kill the engine has %v, %v; want the run's volume", left, err)
	}

	c.gcUntilSettled(t)
	if left, err := dockertest.Leftovers(t.Context(), c.dc, byRun); err != nil || len(left) != 0 {
		t.Errorf("after gc the run %s left %v, %v", run, left, err)
	}
	var recs []struct{ ID, Kind, State string }
	ls := c.run(t.Context(), nil, "ledger", "ls", "--all", "--json")
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --all --json: %v\n%s", err, ls.stdout)
	}
	volumes := 0
	for _, rec := range recs {
		if rec.Kind == string(agentenv.KindVolume) {
			volumes++
		}
		if rec.State != string(agentenv.StateGone) && !(rec.Kind == string(agentenv.KindImage) && rec.State == string(agentenv.StateLive)) {
			t.Errorf("record %s (%s) is %s after gc", rec.ID, rec.Kind, rec.State)
		}
	}
	if volumes != 1 {
		t.Errorf("the ledger has %d volume records, want the killed run's one:\n%s", volumes, ls.stdout)
	}
}

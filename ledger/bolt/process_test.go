package bolt_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
)

// The writers test re-runs this test binary as writer processes (see TestMain); these
// variables switch it on and tell it what to do.
const (
	envHelperDB = "AGENTENV_TEST_HELPER_LEDGER"
	envHelperID = "AGENTENV_TEST_HELPER_ID"
)

// Each writer process does this many Updates of the shared record and Puts of its own.
const (
	helperUpdates = 150
	helperPuts    = 50
)

// writers are the writer processes of TestWriters.
var writers = []string{"a", "b", "c"}

// TestWriters runs several processes that write the same ledger file at once: each increments a
// counter in one shared record and puts records of its own. No update may be lost and no
// write may fail, a lock timeout least of all. The parent keeps its own Ledger on the file
// all along, as an agentenv ui beside the writers would.
func TestWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.bolt")
	l := open(t, path)
	if err := l.Put(t.Context(), agentenv.Record{ID: "shared", State: agentenv.StateLive, Attrs: map[string]string{"n": "0"}}); err != nil {
		t.Fatal(err)
	}

	type child struct {
		id     string
		cmd    *exec.Cmd
		stdin  *os.File
		ready  *bufio.Reader
		output bytes.Buffer
	}
	var children []*child
	for _, id := range writers {
		c := &child{id: id, cmd: exec.CommandContext(t.Context(), os.Args[0])}
		c.cmd.Env = append(os.Environ(), envHelperDB+"="+path, envHelperID+"="+id)
		c.cmd.Stderr = &c.output
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		c.cmd.Stdin, c.stdin, c.ready = r, w, bufio.NewReader(stdout)
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		children = append(children, c)
	}
	// Both have opened the ledger before either writes, so that their writes overlap.
	for _, c := range children {
		if err := waitReady(c.ready); err != nil {
			t.Fatalf("writer did not start: %v\n%s", err, &c.output)
		}
	}
	for _, c := range children {
		c.stdin.Close()
	}
	for _, c := range children {
		rest, _ := c.ready.ReadString(0)
		err := c.cmd.Wait()
		out := rest + c.output.String()
		if err != nil {
			t.Errorf("writer %s: %v\n%s", c.id, err, out)
		}
		if strings.Contains(out, "busy") || strings.Contains(out, "timeout") {
			t.Errorf("writer %s reported a lock error:\n%s", c.id, out)
		}
	}

	r, err := l.Get(t.Context(), "shared")
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(len(writers) * helperUpdates); r.Attrs["n"] != want {
		t.Errorf("counter = %s after %d writers did %d increments each, want %s", r.Attrs["n"], len(writers), helperUpdates, want)
	}
	for _, id := range writers {
		rs, err := l.List(t.Context(), agentenv.Filter{Run: "writer-" + id})
		if err != nil || len(rs) != helperPuts {
			t.Errorf("List(run writer-%s) = %d records, %v; want %d", id, len(rs), err, helperPuts)
		}
	}
}

// waitReady reads the child's output up to its "ready" line.
func waitReady(r *bufio.Reader) error {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("before ready: %w", err)
		}
		if strings.TrimSpace(line) == "ready" {
			return nil
		}
	}
}

// TestMain runs this test binary as one writer of TestWriters when the parent says so in the
// environment, and as the tests otherwise.
func TestMain(m *testing.M) {
	if path := os.Getenv(envHelperDB); path != "" {
		if err := helperWriter(path, os.Getenv(envHelperID)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperWriter is one writer process: it opens the ledger at path, says "ready", waits for its
// stdin to close, then updates the shared record and puts records of its own.
func helperWriter(path, id string) error {
	ctx := context.Background()
	l, err := bolt.Open(ctx, path, nil)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println("ready")
	// The parent closes stdin once every writer is ready.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err == nil {
		return errors.New("stdin: want EOF as the start signal")
	}
	for i := range max(helperUpdates, helperPuts) {
		if i < helperUpdates {
			_, err := l.Update(ctx, "shared", func(r *agentenv.Record) error {
				n, err := strconv.Atoi(r.Attrs["n"])
				r.Attrs["n"] = strconv.Itoa(n + 1)
				return err
			})
			if err != nil {
				return fmt.Errorf("Update(shared) #%d: %w", i, err)
			}
		}
		if i < helperPuts {
			r := agentenv.Record{ID: fmt.Sprintf("%s-%d", id, i), State: agentenv.StateCreating, Run: "writer-" + id}
			if err := l.Put(ctx, r); err != nil {
				return fmt.Errorf("Put(%s): %w", r.ID, err)
			}
		}
	}
	return nil
}

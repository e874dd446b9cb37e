package soak

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"

	"github.com/agentenv/agentenv"
)

// The phrases agentenv logs when a teardown could not confirm a sandbox down. Each is a promise
// about the engine: the sandbox is still there. One that is not is a false warning, which hides
// the true ones (seed 002: Modal logged both for every sandbox that had already finished).
const (
	PhraseNotTerminated = "was not terminated"
	PhraseMayStillBeUp  = "may still be up"
)

// Warning is one log line carrying a teardown warning, classified against the engine.
type Warning struct {
	Source string `json:"source"` // the process that logged it: "run" or "gc"
	Phrase string `json:"phrase"` // PhraseNotTerminated or PhraseMayStillBeUp
	Record string `json:"record"` // the record_id the line names; empty if none
	Line   string `json:"line"`
	// True reports whether the engine still listed something under Record when the process
	// that logged the line had exited.
	True   bool     `json:"true"`
	Listed []string `json:"listed,omitempty"` // what the engine listed under Record
}

// recordAttr matches the record_id attribute of a text or JSON slog line.
var recordAttr = regexp.MustCompile(`"?record_id"?[=:]"?([^\s",}]+)`)

// ParseWarnings returns the lines of log that carry a teardown warning, unclassified.
func ParseWarnings(source string, log io.Reader) ([]Warning, error) {
	var out []Warning
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		phrase := ""
		switch {
		case strings.Contains(line, PhraseNotTerminated):
			phrase = PhraseNotTerminated
		case strings.Contains(line, PhraseMayStillBeUp):
			phrase = PhraseMayStillBeUp
		default:
			continue
		}
		w := Warning{Source: source, Phrase: phrase, Line: line}
		if m := recordAttr.FindStringSubmatch(line); m != nil {
			w.Record = m[1]
		}
		out = append(out, w)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read %s log: %w", source, err)
	}
	return out, nil
}

// Classify sets True and Listed on each warning by listing the engine under its record label.
// A warning that names no record cannot be checked and stays false: a warning nobody can act on
// is no better than a wrong one.
func Classify(ctx context.Context, e Engine, ws []Warning) error {
	for i := range ws {
		if ws[i].Record == "" {
			continue
		}
		rs, err := e.List(ctx, map[string]string{agentenv.LabelRecord: ws[i].Record})
		if err != nil {
			return fmt.Errorf("classify warning on %s: %w", ws[i].Record, err)
		}
		ws[i].Listed = nil
		for _, r := range rs {
			ws[i].Listed = append(ws[i].Listed, r.String())
		}
		ws[i].True = len(rs) > 0
	}
	return nil
}

// countWarnings returns how many of ws are true and how many false.
func countWarnings(ws []Warning) (truthful, wrong int) {
	for _, w := range ws {
		if w.True {
			truthful++
		} else {
			wrong++
		}
	}
	return truthful, wrong
}

// liveClassifier is the stderr of a child process: it passes every byte on to out and
// classifies each warning line against the engine the moment it is written, since a later
// retry may remove the sandbox and make a true warning look false.
type liveClassifier struct {
	out    io.Writer
	source string
	engine Engine
	lines  chan string
	done   chan struct{}
	buf    []byte

	mu       sync.Mutex
	warnings []Warning
	errs     []error
}

func newLiveClassifier(source string, e Engine, out io.Writer) *liveClassifier {
	c := &liveClassifier{out: out, source: source, engine: e, lines: make(chan string, 256), done: make(chan struct{})}
	go c.loop()
	return c
}

// Write implements io.Writer; exec calls it from one goroutine.
func (c *liveClassifier) Write(p []byte) (int, error) {
	c.buf = append(c.buf, p...)
	for {
		i := bytes.IndexByte(c.buf, '\n')
		if i < 0 {
			break
		}
		if line := string(c.buf[:i]); strings.Contains(line, PhraseNotTerminated) || strings.Contains(line, PhraseMayStillBeUp) {
			c.lines <- line
		}
		c.buf = c.buf[i+1:]
	}
	return c.out.Write(p)
}

func (c *liveClassifier) loop() {
	defer close(c.done)
	for line := range c.lines {
		ws, err := ParseWarnings(c.source, strings.NewReader(line))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
			err = Classify(ctx, c.engine, ws)
			cancel()
		}
		c.mu.Lock()
		if err != nil {
			c.errs = append(c.errs, err)
		}
		c.warnings = append(c.warnings, ws...)
		c.mu.Unlock()
	}
}

// wait returns the classified warnings once the process has exited and its stderr is drained.
func (c *liveClassifier) wait() ([]Warning, error) {
	if len(c.buf) > 0 {
		_, _ = c.Write([]byte("\n"))
	}
	close(c.lines)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.warnings, errors.Join(c.errs...)
}

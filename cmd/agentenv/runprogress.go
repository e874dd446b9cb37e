package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/agentenv/agentenv/eval"
)

// progressRedraw is how often a terminal's progress line is redrawn at most.
const progressRedraw = 200 * time.Millisecond

// newProgressPrinter returns the progress display of a run group on w: on a terminal one line
// redrawn in place (at most every progressRedraw, and at the end); elsewhere one plain line per
// episode that ends, with the group's counts.
func newProgressPrinter(w io.Writer) func(eval.Status) {
	f, ok := w.(*os.File)
	tty := ok && term.IsTerminal(int(f.Fd()))
	var mu sync.Mutex
	var last time.Time
	return func(s eval.Status) {
		mu.Lock()
		defer mu.Unlock()
		if !tty {
			if s.Last != nil {
				fmt.Fprintf(w, "%s %s %s score=%s | %s\n", s.LastTask, s.Last.Run, s.Last.Outcome, score(s.Last.Score), s)
			}
			return
		}
		end := s.Done == s.Total
		if !end && time.Since(last) < progressRedraw {
			return
		}
		last = time.Now()
		fmt.Fprintf(w, "\r\033[K%s", s)
		if end {
			fmt.Fprintln(w)
		}
	}
}

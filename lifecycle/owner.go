package lifecycle

import (
	"fmt"
	"os"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/procinfo"
)

// CurrentOwner returns the Owner that names this process: host name, pid and start time.
func CurrentOwner() (agentenv.Owner, error) {
	host, err := os.Hostname()
	if err != nil {
		return agentenv.Owner{}, fmt.Errorf("owner: hostname: %w", err)
	}
	pid := os.Getpid()
	start, err := procinfo.Start(pid)
	if err != nil {
		return agentenv.Owner{}, fmt.Errorf("owner: %w", err)
	}
	return agentenv.Owner{Host: host, PID: pid, Start: start}, nil
}

// ProcessAlive reports whether a process with o's pid and start time runs on this host. It must
// only be asked about owners on this host.
func ProcessAlive(o agentenv.Owner) bool { return procinfo.Alive(o.PID, o.Start) }

package lifecycle

import (
	"fmt"
	"os"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/procinfo"
)

// CurrentOwner returns the Owner that names this process: host name and host id (the boot and
// PID namespace its pid belongs to, procinfo.HostID), pid and start time. gc checks an owner by
// its pid only when the host (name and id) is its own, so processes in two containers with one
// host name, sharing a ledger, judge each other by lease and never by a pid of the wrong space.
func CurrentOwner() (agentenv.Owner, error) { return OwnerOf(os.Getpid()) }

// OwnerOf returns the Owner that process pid, in this process's PID namespace (a child, say),
// writes on the records it makes; see CurrentOwner.
func OwnerOf(pid int) (agentenv.Owner, error) {
	name, err := os.Hostname()
	if err != nil {
		return agentenv.Owner{}, fmt.Errorf("owner: hostname: %w", err)
	}
	start, err := procinfo.Start(pid)
	if err != nil {
		return agentenv.Owner{}, fmt.Errorf("owner: %w", err)
	}
	return agentenv.Owner{Host: name + "@" + procinfo.HostID(), PID: pid, Start: start}, nil
}

// ProcessAlive reports whether a process with o's pid and start time runs on this host. It must
// only be asked about owners on this host.
func ProcessAlive(o agentenv.Owner) bool { return procinfo.Alive(o.PID, o.Start) }

// Package procinfo reads what agentenv needs to know about a local process: its start time,
// which together with its pid names it uniquely across pid reuse, whether it still runs, and
// which PID space it lives in (HostID), so that a pid is only ever compared with pids of the
// same space.
package procinfo

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ErrNoProc means this system has no /proc, so start times cannot be read.
var ErrNoProc = errors.New("no /proc on this system")

// Start returns the start time of pid in clock ticks since boot (field 22 of /proc/PID/stat).
func Start(pid int) (int64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(f[19], 10, 64)
}

// Alive reports whether pid runs, is not a zombie, and (when start is not 0) started at start.
// Without /proc it falls back to signal 0, which cannot tell a reused pid.
func Alive(pid int, start int64) bool {
	if pid <= 0 {
		return false
	}
	f, err := statFields(pid)
	if errors.Is(err, ErrNoProc) {
		return syscall.Kill(pid, 0) == nil
	}
	if err != nil || f[0] == "Z" || f[0] == "X" {
		return false
	}
	if start == 0 {
		return true
	}
	st, err := strconv.ParseInt(f[19], 10, 64)
	return err == nil && st == start
}

// statFields returns the fields of /proc/PID/stat after the command name, so that f[0] is the
// state (field 3) and f[19] the start time (field 22).
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if _, serr := os.Stat("/proc/self/stat"); serr != nil {
			return nil, ErrNoProc
		}
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	// The command name is in parentheses and may hold spaces and parentheses itself.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("process %d: malformed stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return nil, fmt.Errorf("process %d: short stat", pid)
	}
	return f, nil
}

// HostID names the space in which this process's pids mean something: the machine's boot (the
// kernel's boot id) and this process's PID namespace. Two processes with equal HostIDs can
// check on each other by pid; two containers with the same host name have different HostIDs,
// and so does one machine after a reboot. Where neither can be read, HostID is random, so that
// other processes judge this one by its lease alone.
func HostID() string {
	boot, berr := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, nerr := os.Readlink("/proc/self/ns/pid")
	if berr != nil || nerr != nil {
		var b [8]byte
		rand.Read(b[:])
		return "r" + hex.EncodeToString(b[:])
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(string(boot)) + "|" + ns))
	return hex.EncodeToString(h[:6])
}

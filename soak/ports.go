package soak

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// tcpListen is the st column of a LISTEN socket in /proc/net/tcp.
const tcpListen = "0A"

// ParseListening returns the local ports of the LISTEN sockets in a /proc/net/tcp or tcp6 table.
func ParseListening(r io.Reader) (map[int]bool, error) {
	out := map[int]bool{}
	sc := bufio.NewScanner(r)
	header := true
	for sc.Scan() {
		if header {
			header = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[3] != tcpListen {
			continue
		}
		_, port, ok := strings.Cut(f[1], ":")
		if !ok {
			return nil, fmt.Errorf("proc net tcp: bad local address %q", f[1])
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("proc net tcp: bad port %q: %w", port, err)
		}
		out[int(p)] = true
	}
	return out, sc.Err()
}

// listeningPorts returns the TCP ports something on this host listens on (IPv4 and IPv6), as
// /proc/net/tcp and /proc/net/tcp6 list them in this network namespace.
func listeningPorts() (map[int]bool, error) {
	all := map[int]bool{}
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listening ports: %w", err)
		}
		ports, err := ParseListening(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		for p := range ports {
			all[p] = true
		}
	}
	return all, nil
}

package spec

import (
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv/internal/yamlfile"
)

// Default limits of a component whose resources leave them unset. They keep one runaway
// component (a leak, a fork bomb, a busy loop) from taking the host, and are enough for every
// component agentenv ships.
const (
	// DefaultMemory is a component's memory limit in bytes: 1 GiB.
	DefaultMemory int64 = 1 << 30
	// DefaultCPUs is a component's CPU limit: one CPU.
	DefaultCPUs = 1.0
)

// Limits on what resources may say: below MinMemory a container cannot start (Docker's floor),
// and MaxPids is well above any server's need.
const (
	MinMemory int64 = 6 << 20
	MaxCPUs         = 1024.0
	MaxPids   int64 = 1 << 22
)

// Resources are the limits of one component's sandbox, written under resources: of a server,
// a sidecar, the service DB or the gateway. Defaults fills Memory and CPUs; Pids 0 leaves the
// provider's default (agentenv.DefaultPidsLimit).
type Resources struct {
	// Memory is the memory limit in bytes, written as a byte count or with a binary suffix:
	// "512Mi", "1Gi", "1g" and "256m" (k, m, g are 1024-based, as Docker reads them).
	Memory int64 `yaml:"memory"`
	// CPUs is the CPU limit in CPUs, such as 0.5 or "2".
	CPUs float64 `yaml:"cpus"`
	// Pids is the most processes at once.
	Pids int64 `yaml:"pids"`
}

func (r *Resources) defaults() {
	if r.Memory == 0 {
		r.Memory = DefaultMemory
	}
	if r.CPUs == 0 {
		r.CPUs = DefaultCPUs
	}
}

func (d *decoder) decodeResources(n *yaml.Node, path string, r *Resources) {
	d.Fields(n, path, []string{"memory", "cpus", "pids"}, func(key string, v *yaml.Node, p string) {
		if v = d.Resolve(v, p); v == nil || yamlfile.IsNull(v) {
			return
		}
		if v.Kind != yaml.ScalarNode {
			d.Fail(v, p, "want a scalar, got %s", yamlfile.Describe(v))
			return
		}
		switch key {
		case "memory":
			b, ok := ParseMemory(v.Value)
			if !ok {
				d.Fail(v, p, "invalid memory %q: want a byte count of at least 6Mi, such as \"512Mi\" or \"1g\"", v.Value)
				return
			}
			r.Memory = b
		case "cpus":
			c, err := strconv.ParseFloat(v.Value, 64)
			if err != nil || !(c > 0 && c <= MaxCPUs) || c*1e9 < 1 {
				d.Fail(v, p, "invalid cpus %q: want a positive number of CPUs such as 0.5 or 2", v.Value)
				return
			}
			r.CPUs = c
		case "pids":
			n, err := strconv.ParseInt(v.Value, 10, 64)
			if err != nil || n < 16 || n > MaxPids {
				d.Fail(v, p, "invalid pids %q: want an integer from 16 to %d", v.Value, MaxPids)
				return
			}
			r.Pids = n
		}
	})
}

// ParseMemory reads a memory size: a byte count, or a number with one of the suffixes k, m, g,
// Ki, Mi, Gi (all 1024-based; a trailing b or B is allowed, as in "512mb"). It reports false
// for anything else, for a fraction of a byte and for less than MinMemory.
func ParseMemory(s string) (int64, bool) {
	num := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(s), "b"), "B")
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"k", 1 << 10}, {"K", 1 << 10}, {"m", 1 << 20}, {"M", 1 << 20}, {"g", 1 << 30}, {"G", 1 << 30}} {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSuffix(num, u.suffix), u.mult
			break
		}
	}
	if num == "" || strings.ContainsAny(num, "+-eE") {
		return 0, false
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f <= 0 {
		return 0, false
	}
	b := f * float64(mult)
	if b > math.MaxInt64/2 || b != math.Trunc(b) || int64(b) < MinMemory {
		return 0, false
	}
	return int64(b), true
}

package bench

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes where the figures were taken.
type Machine struct {
	CPUs    int    `json:"cpus"`
	CPU     string `json:"cpu"`
	MemGiB  int    `json:"mem_gib"`
	Kernel  string `json:"kernel"`
	Docker  string `json:"docker"`  // engine version and API
	Compose string `json:"compose"` // "docker compose version", or why it is missing
	Go      string `json:"go"`
}

// Describe reads the machine's description from /proc and the docker CLI.
func Describe(ctx context.Context) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.CPU = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.Atoi(strings.Fields(procField("/proc/meminfo", "MemTotal") + " 0")[0]); err == nil {
		m.MemGiB = (kb + 512*1024) / (1024 * 1024)
	}
	m.Docker = command(ctx, "docker", "version", "--format", "engine {{.Server.Version}} (API {{.Server.APIVersion}}), CLI {{.Client.Version}}")
	m.Compose = command(ctx, "docker", "compose", "version", "--short")
	if m.Compose == "" {
		m.Compose = "not installed"
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// command returns the trimmed output of a short command, or "" if it fails.
func command(ctx context.Context, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

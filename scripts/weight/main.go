// Command weight measures what each Go module costs the agentenv binary: bytes downloaded, bytes
// of source unpacked, CPU seconds to compile its packages on an empty build cache, and bytes in
// the linked binary, with the packages of this repository that import it directly.
//
//	go run ./scripts/weight [-pkg ./cmd/agentenv] [-modcache DIR] [-top N] [-o FILE]
//
// It builds PKG once with empty GOCACHE (and, unless -modcache is given, an empty GOMODCACHE)
// in a temporary folder, with -toolexec pointing back at itself: every compile, asm and cgo step
// is timed by its own rusage, so the CPU figures do not depend on what else the machine is doing
// (its wall clock does). The table is Markdown, for BENCHMARKS.md.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// logEnv names the file the -toolexec mode appends its timings to.
const logEnv = "AGENTENV_WEIGHT_LOG"

func main() {
	if log := os.Getenv(logEnv); log != "" && len(os.Args) > 1 {
		os.Exit(toolexec(log, os.Args[1:]))
	}
	pkg := flag.String("pkg", "./cmd/agentenv", "the main package to weigh")
	modcache := flag.String("modcache", "", "a module cache to reuse (default: a new empty one, so downloads are measured)")
	top := flag.Int("top", 25, "rows in the table (the rest are summed in one row)")
	out := flag.String("o", "", "write the table here too")
	flag.Parse()
	if err := run(*pkg, *modcache, *top, *out); err != nil {
		fmt.Fprintln(os.Stderr, "weight:", err)
		os.Exit(1)
	}
}

// toolexec runs the tool in args and appends "PKG TOOL USER_S SYS_S" to log.
func toolexec(log string, args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState != nil {
		pkg := "-"
		for i, a := range args {
			if a == "-p" && i+1 < len(args) {
				pkg = args[i+1]
			}
		}
		ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if ru != nil && pkg != "-" {
			line := fmt.Sprintf("%s %s %.3f %.3f\n", pkg, filepath.Base(args[0]),
				time.Duration(ru.Utime.Nano()).Seconds(), time.Duration(ru.Stime.Nano()).Seconds())
			if f, ferr := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); ferr == nil {
				f.WriteString(line)
				f.Close()
			}
		}
	}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "weight toolexec:", err)
		return 1
	}
	return 0
}

// weight is what one module costs.
type weight struct {
	Module   string
	Download int64   // bytes of the module's zip in the download cache
	Source   int64   // bytes unpacked
	CPU      float64 // compile, asm and cgo CPU seconds (user + system)
	Packages int     // packages of the module compiled
	Binary   int64   // bytes of its symbols in the binary
	Users    map[string]bool
}

func run(pkg, modcache string, top int, out string) error {
	tmp, err := os.MkdirTemp("", "agentenv-weight-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if modcache == "" {
		modcache = filepath.Join(tmp, "mod")
	}
	env := append(os.Environ(), "GOCACHE="+filepath.Join(tmp, "cache"), "GOMODCACHE="+modcache, "GOFLAGS=-mod=readonly")
	goCmd := func(args ...string) *exec.Cmd {
		c := exec.Command("go", args...)
		c.Env = env
		c.Stderr = os.Stderr
		return c
	}

	// Download (timed), then the module of every package in the build.
	start := time.Now()
	listing, err := goCmd("list", "-deps", "-f", "{{.ImportPath}}\t{{with .Module}}{{.Path}}\t{{.Version}}\t{{.Dir}}{{end}}", pkg).Output()
	if err != nil {
		return fmt.Errorf("go list %s: %w", pkg, err)
	}
	download := time.Since(start)
	mods := map[string]*weight{}
	pkgMod := map[string]string{} // import path -> module path ("std" for the standard library)
	modOf := func(m string) *weight {
		w := mods[m]
		if w == nil {
			w = &weight{Module: m, Users: map[string]bool{}}
			mods[m] = w
		}
		return w
	}
	self0 := ""
	for line := range strings.Lines(string(listing)) {
		f := strings.Split(strings.TrimSpace(line), "\t")
		if len(f) == 1 {
			pkgMod[f[0]] = "std"
			modOf("std")
			continue
		}
		pkgMod[f[0]] = f[1]
		w := modOf(f[1])
		if f[2] == "" {
			self0 = f[1]
			continue
		}
		if w.Source == 0 {
			dir := filepath.Join(modcache, escape(f[1])+"@"+f[2])
			w.Source = du(dir)
			if st, err := os.Stat(filepath.Join(modcache, "cache", "download", escape(f[1]), "@v", f[2]+".zip")); err == nil {
				w.Download = st.Size()
			}
		}
	}

	// Who needs each module: this module's packages that import, directly, a package of another
	// module that is or depends on one of its packages.
	imports, err := goCmd("list", "-deps", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}", pkg).Output()
	if err != nil {
		return fmt.Errorf("go list imports: %w", err)
	}
	direct, deps := map[string][]string{}, map[string][]string{}
	for line := range strings.Lines(string(imports)) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) == 3 {
			direct[f[0]], deps[f[0]] = strings.Fields(f[1]), strings.Fields(f[2])
		}
	}
	for from, imps := range direct {
		if pkgMod[from] != self0 {
			continue
		}
		user := strings.TrimPrefix(strings.TrimPrefix(from, self0), "/")
		for _, imp := range imps {
			if m := pkgMod[imp]; m == self0 || m == "std" || m == "" {
				continue
			}
			for _, p := range append(deps[imp], imp) {
				if m := pkgMod[p]; m != self0 && m != "std" && m != "" {
					modOf(m).Users[user] = true
				}
			}
		}
	}

	// The build, every tool step timed.
	log := filepath.Join(tmp, "tools.log")
	bin := filepath.Join(tmp, "bin")
	build := goCmd("build", "-trimpath", "-toolexec", self, "-o", bin, pkg)
	build.Env = append(build.Env, logEnv+"="+log)
	build.Stdout = os.Stderr
	start = time.Now()
	var before syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before)
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	buildWall := time.Since(start)
	var after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after)
	buildCPU := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	lines, err := os.ReadFile(log)
	if err != nil {
		return err
	}
	compiled := map[string]bool{}
	for line := range strings.Lines(string(lines)) {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		u, _ := strconv.ParseFloat(f[2], 64)
		s, _ := strconv.ParseFloat(f[3], 64)
		m := pkgMod[f[0]]
		if m == "" {
			m = "std" // runtime internals compiled under their own -p names
			if strings.Contains(f[0], ".") {
				m = moduleFor(f[0], mods)
			}
		}
		w := modOf(m)
		w.CPU += u + s
		if f[1] == "compile" && !compiled[f[0]] {
			compiled[f[0]] = true
			w.Packages++
		}
	}

	// Bytes in the binary, by symbol.
	nm, err := exec.Command("go", "tool", "nm", "-size", bin).Output()
	if err != nil {
		return fmt.Errorf("go tool nm: %w", err)
	}
	var linked int64
	sc := bufio.NewScanner(bytes.NewReader(nm))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		size, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || size == 0 {
			continue
		}
		linked += size
		modOf(moduleFor(symbolPackage(strings.Join(f[3:], " ")), mods)).Binary += size
	}
	st, err := os.Stat(bin)
	if err != nil {
		return err
	}
	strip := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin+".stripped", pkg)
	strip.Env = env
	strip.Stderr = os.Stderr
	if err := strip.Run(); err != nil {
		return fmt.Errorf("stripped build: %w", err)
	}
	sst, err := os.Stat(bin + ".stripped")
	if err != nil {
		return err
	}

	var rows []*weight
	var total weight
	for _, w := range mods {
		rows = append(rows, w)
		total.Download += w.Download
		total.Source += w.Source
		total.CPU += w.CPU
		total.Packages += w.Packages
		total.Binary += w.Binary
	}
	slices.SortFunc(rows, func(a, b *weight) int { return cmp.Compare(b.CPU, a.CPU) })

	var b strings.Builder
	fmt.Fprintf(&b, "`%s`, %s, on %d cores: %d modules, %d packages compiled. Download %s MB (%.1f s wall). "+
		"Cold build %.1f s wall, %.1f s CPU (compile, asm and cgo steps: %.1f s). Binary %.1f MB, %.1f MB with -s -w.\n\n",
		pkg, time.Now().UTC().Format("2006-01-02"), numCPU(), len(mods)-1, total.Packages, mb(total.Download), download.Seconds(),
		buildWall.Seconds(), buildCPU.Seconds(), total.CPU, float64(st.Size())/1e6, float64(sst.Size())/1e6)
	fmt.Fprintln(&b, "| module | download MB | source MB | packages | compile CPU s | share | binary MB | imported by |")
	fmt.Fprintln(&b, "|---|--:|--:|--:|--:|--:|--:|---|")
	var rest weight
	for i, w := range rows {
		if i >= top {
			rest.Download += w.Download
			rest.Source += w.Source
			rest.Packages += w.Packages
			rest.CPU += w.CPU
			rest.Binary += w.Binary
			continue
		}
		name := w.Module
		if name == self0 {
			name += " (this repository)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.1f | %.0f%% | %s | %s |\n", name, mb(w.Download), mb(w.Source), w.Packages,
			w.CPU, 100*w.CPU/total.CPU, mb(w.Binary), users(w.Users))
	}
	if len(rows) > top {
		fmt.Fprintf(&b, "| %d more | %s | %s | %d | %.1f | %.0f%% | %s | |\n", len(rows)-top, mb(rest.Download), mb(rest.Source),
			rest.Packages, rest.CPU, 100*rest.CPU/total.CPU, mb(rest.Binary))
	}
	fmt.Fprintf(&b, "| **all** | %s | %s | %d | %.1f | 100%% | %s | |\n", mb(total.Download), mb(total.Source), total.Packages, total.CPU, mb(linked))
	fmt.Print(b.String())
	if out != "" {
		return os.WriteFile(out, []byte(b.String()), 0o644)
	}
	return nil
}

// moduleFor returns the module of the longest path in mods that prefixes p, or "std".
func moduleFor(p string, mods map[string]*weight) string {
	best := "std"
	for m := range mods {
		if m == "std" {
			continue
		}
		if (p == m || strings.HasPrefix(p, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	return best
}

// symbolPackage returns the import path a symbol's name starts with: "type:*github.com/a/b.T"
// gives "github.com/a/b".
func symbolPackage(sym string) string {
	for _, p := range []string{"type:", "go:itab.", "go:info.", "*", "go:string.", "go:"} {
		sym = strings.TrimPrefix(sym, p)
	}
	sym = strings.TrimLeft(sym, "*[]")
	slash := strings.LastIndexByte(sym, '/')
	dot := strings.IndexByte(sym[slash+1:], '.')
	if dot < 0 {
		return sym
	}
	return sym[:slash+1+dot]
}

// escape is the module cache's case encoding: an upper-case letter becomes '!' and its lower case.
func escape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func du(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func mb(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(n)/1e6)
}

func users(u map[string]bool) string {
	var s []string
	for k := range u {
		if k == "" {
			k = "(root)"
		}
		s = append(s, k)
	}
	slices.Sort(s)
	if len(s) > 4 {
		s = append(s[:4], fmt.Sprintf("+%d", len(s)-4))
	}
	return strings.Join(s, ", ")
}

func numCPU() int {
	out, err := exec.Command("nproc").Output()
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

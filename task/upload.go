package task

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv/internal/shellquote"
)

// upload copies a local file or folder into a sandbox, replacing what the path held: a folder
// arrives whole and alone, so nothing the agent left at that path survives (a Harbor task's
// tests/ and solution/ are copied in this way, only when their turn comes). With merge, what an
// earlier upload put there stays and same-named files are overwritten (a multi-step task's
// step tests over its shared ones).
type upload struct {
	Sandbox string `yaml:"sandbox" task:"required"` // the deploy_sandbox step
	From    string `yaml:"from" task:"required"`    // a file or folder, relative to the task file
	To      string `yaml:"to" task:"required"`      // an absolute path in the sandbox
	Merge   bool   `yaml:"merge"`                   // add to what the path holds instead of replacing it
}

// maxUpload bounds what one upload step copies: task folders are scripts and fixtures, and a
// larger tree belongs in the image.
const maxUpload = 64 << 20

func (s *upload) Check() error {
	if !path.IsAbs(s.To) || path.Clean(s.To) == "/" {
		return fmt.Errorf("to: want an absolute path below /, got %q", s.To)
	}
	return nil
}

func (s *upload) Refs() []Ref { return []Ref{{"sandbox", s.Sandbox, sandboxTypes}} }

func (s *upload) Run(ctx context.Context, sc *scope) (Result, error) {
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return Result{}, err
	}
	from, err := sc.within("from", s.From)
	if err != nil {
		return Result{}, err
	}
	files, execs, err := readTree(from, path.Clean(s.To))
	if err != nil {
		return Result{}, fmt.Errorf("from: %w", err)
	}
	m := sc.e.r.Manager
	// The files go to a folder of their own first, then one command puts it in place of what
	// the path held (or, with merge, over it) and makes it readable by every user (a verifier
	// may run as another user than the one that made it).
	stage := path.Join("/tmp", "agentenv-upload-"+sc.e.id+"-"+sc.s.ID)
	n := 0
	for _, f := range files {
		if err := m.WriteFile(ctx, ref.Record, path.Join(stage, strings.TrimPrefix(f.to, "/")), f.data); err != nil {
			return Result{}, fmt.Errorf("write %s: %w", f.to, err)
		}
		n += len(f.data)
	}
	to, src := shellquote.Join([]string{s.To}), shellquote.Join([]string{path.Join(stage, s.To)})
	script := fmt.Sprintf("rm -rf -- %s && mkdir -p -- \"$(dirname -- %s)\" && mv -- %s %s", to, to, src, to)
	if s.Merge {
		script = fmt.Sprintf("mkdir -p -- %s && cp -R -- %s/. %s 2>/dev/null || cp -- %s %s", to, src, to, src, to)
	}
	script += " && chmod -R a+rX -- " + to
	for _, x := range execs {
		script += " && chmod a+x -- " + shellquote.Join([]string{x})
	}
	script += " && rm -rf -- " + shellquote.Join([]string{stage})
	if res, err := m.Exec(ctx, ref.Record, []string{"sh", "-c", script}); err != nil {
		return Result{}, fmt.Errorf("put %s in place: %w", s.To, err)
	} else if res.ExitCode != 0 {
		return Result{}, fmt.Errorf("put %s in place: exited %d: %s", s.To, res.ExitCode, tail(string(res.Stderr), 200))
	}
	return Result{Outputs: map[string]string{"files": strconv.Itoa(len(files)), "bytes": strconv.Itoa(n)}}, nil
}

// treeFile is one file of an upload.
type treeFile struct {
	to   string
	data []byte
}

// readTree reads the regular files under from (or from itself, a file) as files at to, and
// names those that are executable. Symbolic links and other special files are refused rather
// than followed out of the folder.
func readTree(from, to string) (files []treeFile, execs []string, err error) {
	total := 0
	err = filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file (links are not copied)", p)
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if total += len(data); total > maxUpload {
			return fmt.Errorf("more than %d MiB: put it in the image", maxUpload>>20)
		}
		dst := to
		if rel != "." {
			dst = path.Join(to, filepath.ToSlash(rel))
		}
		files = append(files, treeFile{dst, data})
		if fi, err := d.Info(); err == nil && fi.Mode()&0o111 != 0 {
			execs = append(execs, dst)
		}
		return nil
	})
	if err == nil && len(files) == 0 {
		err = errors.New(from + " holds no files")
	}
	return files, execs, err
}

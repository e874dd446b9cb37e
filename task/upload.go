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
// step tests over its shared ones). A reward verifier and a harness agent take the same
// uploads (their `upload:`) and put them in place in their own one command.
type upload struct {
	Sandbox string `yaml:"sandbox" task:"required"` // the deploy_sandbox step
	From    string `yaml:"from" task:"required"`    // a file or folder, relative to the task file
	To      string `yaml:"to" task:"required"`      // an absolute path in the sandbox
	Merge   bool   `yaml:"merge"`                   // add to what the path holds instead of replacing it
}

// placement is one local file or folder put at an absolute path of a sandbox: the upload
// step's, and each entry of a reward verifier's or a harness's `upload:`.
type placement struct {
	From  string `yaml:"from" task:"required"` // a file or folder, relative to the task file
	To    string `yaml:"to" task:"required"`   // an absolute path in the sandbox
	Merge bool   `yaml:"merge"`                // add to what the path holds instead of replacing it
}

// maxUpload bounds what one upload step copies: task folders are scripts and fixtures, and a
// larger tree belongs in the image.
const maxUpload = 64 << 20

func (s *upload) Check() error { return s.placement().check("") }

func (s *upload) placement() placement { return placement{From: s.From, To: s.To, Merge: s.Merge} }

// check checks p, the entry field of a step (field "" for the upload step's own fields).
func (p placement) check(field string) error {
	if !path.IsAbs(p.To) || path.Clean(p.To) == "/" {
		return fmt.Errorf("%s: want an absolute path below /, got %q", joinField(field, "to"), p.To)
	}
	return nil
}

// checkPlacements checks the entries of a step's `upload:` list, field.
func checkPlacements(field string, ps []placement) error {
	for i, p := range ps {
		if err := p.check(fmt.Sprintf("%s[%d]", field, i)); err != nil {
			return err
		}
	}
	return nil
}

// joinField is field.name, or name alone for the step's own fields.
func joinField(field, name string) string {
	if field == "" {
		return name
	}
	return field + "." + name
}

func (s *upload) Refs() []Ref { return []Ref{{"sandbox", s.Sandbox, sandboxTypes}} }

func (s *upload) Run(ctx context.Context, sc *scope) (Result, error) {
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return Result{}, err
	}
	st, err := stage(ctx, sc, ref.Record, "", []placement{s.placement()})
	if err != nil {
		return Result{}, err
	}
	if res, err := sc.e.r.Manager.Exec(ctx, ref.Record, []string{"sh", "-c", st.script}); err != nil {
		return Result{}, fmt.Errorf("put %s in place: %w", s.To, err)
	} else if res.ExitCode != 0 {
		return Result{}, fmt.Errorf("put %s in place: exited %d: %s", s.To, res.ExitCode, tail(string(res.Stderr), 200))
	}
	return Result{Outputs: map[string]string{"files": strconv.Itoa(st.files), "bytes": strconv.Itoa(st.bytes)}}, nil
}

// staged is what stage wrote: the script that puts it in place, and how much it was.
type staged struct {
	script       string // sh script that puts the files in place and removes the staging folder
	files, bytes int
}

// stage writes the files of ps to a staging folder of record's sandbox (one of this step's
// own) and returns the shell script that puts each in place, in order, as the sandbox's user:
// replacing what its path held (or, with merge, over it), readable by every user (a verifier
// may run as another user than the one that made it), executables kept executable. Nothing is
// in place until the script runs, so a step can put its files in place and run its command in
// one exec. field names ps in errors ("" for the upload step's own fields).
func stage(ctx context.Context, sc *scope, record, field string, ps []placement) (staged, error) {
	m := sc.e.r.Manager
	root := path.Join("/tmp", "agentenv-upload-"+sc.e.id+"-"+sc.s.ID)
	var out staged
	var script []string
	for i, p := range ps {
		f := joinField(field, "from")
		if field != "" {
			f = joinField(fmt.Sprintf("%s[%d]", field, i), "from")
		}
		from, err := sc.within(f, p.From)
		if err != nil {
			return staged{}, err
		}
		files, execs, err := readTree(from, path.Clean(p.To))
		if err != nil {
			return staged{}, fmt.Errorf("%s: %w", f, err)
		}
		dir := path.Join(root, strconv.Itoa(i))
		for _, tf := range files {
			if err := m.WriteFile(ctx, record, path.Join(dir, strings.TrimPrefix(tf.to, "/")), tf.data); err != nil {
				return staged{}, fmt.Errorf("write %s: %w", tf.to, err)
			}
			out.bytes += len(tf.data)
		}
		out.files += len(files)
		to, src := shellquote.Join([]string{p.To}), shellquote.Join([]string{path.Join(dir, p.To)})
		s := fmt.Sprintf("rm -rf -- %s && mkdir -p -- \"$(dirname -- %s)\" && mv -- %s %s", to, to, src, to)
		if p.Merge {
			s = fmt.Sprintf("mkdir -p -- %s && { cp -R -- %s/. %s 2>/dev/null || cp -- %s %s; }", to, src, to, src, to)
		}
		s += " && chmod -R a+rX -- " + to
		for _, x := range execs {
			s += " && chmod a+x -- " + shellquote.Join([]string{x})
		}
		script = append(script, s)
	}
	script = append(script, "rm -rf -- "+shellquote.Join([]string{root}))
	out.script = strings.Join(script, " && ")
	return out, nil
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

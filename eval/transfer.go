package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// The layout of a group saved as a folder (SaveGroup), which `agentenv runs push` packs as a
// bundle and `runs pull` restores (RestoreGroup): the group's document, each episode's
// document, and each episode's run folder (trajectories, their images, gateway trajectories,
// collected artifacts). Paths in the documents that named a run's folder name it by
// runFolderMark, so that the folder says nothing of the machine that saved it.
const (
	GroupFile   = "group.json"
	EpisodesDir = "episodes" // EpisodesDir/RUN.json
	RunsDir     = "runs"     // RunsDir/RUN/...: the run's folder
)

// Attributes a restored group's document carries: where it was pulled from.
const (
	AttrPulledFrom   = "pulled_from"
	AttrPulledDigest = "pulled_digest"
)

// runFolderMark is what a saved document says in place of run id's folder on the machine
// that saved it.
func runFolderMark(id string) string { return "agentenv-run-folder:" + id + "/" }

// SaveGroup writes group id of l, finished, into the empty or absent folder dir: its document,
// every episode's, and the files of each episode's run folder (runsDir/RUN). Documents are
// indented JSON, the same for the same group, and name files of a run's folder by a mark of
// their own in place of runsDir. It returns the files written, sorted. A group still running
// (or interrupted: resume it first), merged into another, or with a trajectory or artifact
// outside its run's folder below runsDir (a state folder other than the one that ran it) is
// refused, wrapping agentenv.ErrInvalid; an unknown id wraps agentenv.ErrNotFound.
func SaveGroup(ctx context.Context, l agentenv.Ledger, id, runsDir, dir string) ([]string, error) {
	st := Store{Ledger: l}
	doc, err := l.Runs().Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("group %s: %w", id, err)
	}
	g, err := FromDoc(doc)
	if err != nil {
		return nil, err
	}
	switch {
	case g.Status == agentenv.RunRunning && Alive(g):
		return nil, fmt.Errorf("group %s is still running: push it once it has finished: %w", id, agentenv.ErrInvalid)
	case g.Status == agentenv.RunRunning:
		return nil, fmt.Errorf("group %s was interrupted: finish it with agentenv run --resume %s (or end it with agentenv gc), then push it: %w", id, id, agentenv.ErrInvalid)
	case g.MergedInto != "":
		return nil, fmt.Errorf("group %s is a shard merged into group %s: push that group: %w", id, g.MergedInto, agentenv.ErrInvalid)
	}
	eps, err := st.Episodes(ctx, g)
	if err != nil {
		return nil, err
	}
	var files []string
	put := func(rel string, data []byte, mode os.FileMode) error {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			return fmt.Errorf("save group %s: %w", id, err)
		}
		files = append(files, p)
		return nil
	}
	data, err := indentJSON(doc)
	if err != nil {
		return nil, err
	}
	if err := put(GroupFile, data, 0o644); err != nil {
		return nil, err
	}
	for _, r := range eps {
		folder := filepath.Join(runsDir, r.ID)
		rewrite(&r, folder+string(filepath.Separator), runFolderMark(r.ID))
		if err := outside(r); err != nil {
			return nil, fmt.Errorf("save group %s: %w: run folders are in %s here: push from the state folder that ran it: %w", id, err, runsDir, agentenv.ErrInvalid)
		}
		data, err := indentJSON(r)
		if err != nil {
			return nil, err
		}
		if err := put(path.Join(EpisodesDir, r.ID+".json"), data, 0o644); err != nil {
			return nil, err
		}
		err = filepath.WalkDir(folder, func(p string, e fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == folder {
				return fs.SkipDir // a run that wrote no file has no folder
			}
			if err != nil || !e.Type().IsRegular() {
				return err // folders are walked; links and the like are not a run's files
			}
			rel, err := filepath.Rel(folder, p)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return put(path.Join(RunsDir, r.ID, filepath.ToSlash(rel)), b, 0o644)
		})
		if err != nil {
			return nil, fmt.Errorf("save group %s: run %s's folder: %w", id, r.ID, err)
		}
	}
	slices.Sort(files)
	return files, nil
}

// outside returns an error naming the first trajectory or artifact of r (whose run folder's
// paths are marked) that is not in its run folder, which a saved group would not carry.
func outside(r agentenv.Run) error {
	mark := runFolderMark(r.ID)
	for _, s := range r.Steps {
		if p := s.Outputs["trajectory"]; p != "" && !strings.HasPrefix(p, mark) {
			return fmt.Errorf("run %s: the trajectory of step %s, %s, is not in its run folder", r.ID, s.ID, p)
		}
		for _, a := range task.Artifacts(s) {
			if !strings.HasPrefix(a.File, mark) {
				return fmt.Errorf("run %s: artifact %s of step %s, %s, is not in its run folder", r.ID, a.Path, s.ID, a.File)
			}
		}
	}
	return nil
}

// Origin is where a restored group came from, recorded on its document.
type Origin struct{ Ref, Digest string }

// RestoreGroup brings the group a SaveGroup folder dir holds into l: each run's files into
// runsDir/RUN (paths in the documents rewritten to them), each episode's document, then the
// group's, marked with its origin, so that a restore cut short is finished by running it again.
// A group l already holds from the same origin, or with the same document, is left as it is
// (already true). A different group or an episode of another group with the same id is refused
// before anything is written, wrapping agentenv.ErrConflict and agentenv.ErrInvalid; a folder
// that is no saved group wraps agentenv.ErrInvalid.
func RestoreGroup(ctx context.Context, l agentenv.Ledger, dir, runsDir string, from Origin) (Group, bool, error) {
	var doc agentenv.Run
	if err := readJSON(filepath.Join(dir, GroupFile), &doc); err != nil {
		return Group{}, false, err
	}
	g, err := FromDoc(doc)
	if err != nil {
		return Group{}, false, fmt.Errorf("%s: %w", GroupFile, err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, EpisodesDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Group{}, false, fmt.Errorf("restore group %s: %w", g.ID, err)
	}
	var eps []agentenv.Run
	for _, e := range ents {
		var r agentenv.Run
		if err := readJSON(filepath.Join(dir, EpisodesDir, e.Name()), &r); err != nil {
			return Group{}, false, err
		}
		if e.Name() != r.ID+".json" || filepath.Base(r.ID) != r.ID || r.ID == "" || strings.HasPrefix(r.ID, ".") ||
			(r.Attrs[AttrGroup] != g.ID && r.Attrs[AttrShardGroup] != g.ID) {
			return Group{}, false, fmt.Errorf("restore group %s: %s is no episode of it: %w", g.ID, e.Name(), agentenv.ErrInvalid)
		}
		eps = append(eps, r)
	}

	if old, err := l.Runs().Get(ctx, g.ID); err == nil {
		if (from.Digest != "" && old.Attrs[AttrPulledDigest] == from.Digest) || sameDoc(old, doc) {
			g, err := FromDoc(old)
			return g, true, err
		}
		return Group{}, false, fmt.Errorf("the ledger holds another group %s (%s, %s, started %s): refused, nothing restored: %w: %w",
			g.ID, old.Task, old.Status, old.Created.Format("2006-01-02 15:04:05"), agentenv.ErrConflict, agentenv.ErrInvalid)
	} else if !errors.Is(err, agentenv.ErrNotFound) {
		return Group{}, false, fmt.Errorf("restore group %s: %w", g.ID, err)
	}
	for _, r := range eps {
		old, err := l.Runs().Get(ctx, r.ID)
		switch {
		case err == nil && old.Attrs[AttrGroup] != g.ID && old.Attrs[AttrShardGroup] != g.ID:
			return Group{}, false, fmt.Errorf("the ledger holds another run %s (of group %q): refused, nothing restored: %w: %w",
				r.ID, old.Attrs[AttrGroup], agentenv.ErrConflict, agentenv.ErrInvalid)
		case err != nil && !errors.Is(err, agentenv.ErrNotFound):
			return Group{}, false, fmt.Errorf("restore group %s: %w", g.ID, err)
		}
	}

	for _, r := range eps {
		folder := filepath.Join(runsDir, r.ID)
		if err := copyTree(filepath.Join(dir, RunsDir, r.ID), folder); err != nil {
			return Group{}, false, fmt.Errorf("restore group %s: run %s's files: %w", g.ID, r.ID, err)
		}
		rewrite(&r, runFolderMark(r.ID), folder+string(filepath.Separator))
		if err := l.Runs().Put(ctx, r); err != nil {
			return Group{}, false, fmt.Errorf("restore group %s: run %s: %w", g.ID, r.ID, err)
		}
	}
	if doc.Attrs == nil {
		doc.Attrs = map[string]string{}
	}
	if from.Ref != "" {
		doc.Attrs[AttrPulledFrom] = from.Ref
	}
	if from.Digest != "" {
		doc.Attrs[AttrPulledDigest] = from.Digest
	}
	if err := l.Runs().Put(ctx, doc); err != nil {
		return Group{}, false, fmt.Errorf("restore group %s: %w", g.ID, err)
	}
	return g, false, nil
}

// sameDoc reports whether two group documents are one, their origin attributes aside.
func sameDoc(a, b agentenv.Run) bool {
	strip := func(r agentenv.Run) []byte {
		r.Attrs = maps.Clone(r.Attrs)
		delete(r.Attrs, AttrPulledFrom)
		delete(r.Attrs, AttrPulledDigest)
		data, _ := json.Marshal(r)
		return data
	}
	return bytes.Equal(strip(a), strip(b))
}

// rewrite replaces from with to in the strings of r that name files: its steps' outputs and
// errors, its attributes and its error.
func rewrite(r *agentenv.Run, from, to string) {
	steps := make([]agentenv.StepRecord, len(r.Steps))
	for i, s := range r.Steps {
		if s.Outputs != nil {
			out := make(map[string]string, len(s.Outputs))
			for k, v := range s.Outputs {
				out[k] = strings.ReplaceAll(v, from, to)
			}
			s.Outputs = out
		}
		s.Error = strings.ReplaceAll(s.Error, from, to)
		steps[i] = s
	}
	r.Steps = steps
	if r.Attrs != nil {
		attrs := make(map[string]string, len(r.Attrs))
		for k, v := range r.Attrs {
			attrs[k] = strings.ReplaceAll(v, from, to)
		}
		r.Attrs = attrs
	}
	r.Error = strings.ReplaceAll(r.Error, from, to)
}

// copyTree copies the regular files below src (absent: none) into dst, folders 0700, files
// 0600, as a run's folder is made.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == src {
			return fs.SkipDir
		}
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o600)
	})
}

func indentJSON(v any) ([]byte, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

func readJSON(p string, v any) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("not a saved run group: %w: %w", err, agentenv.ErrInvalid)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w: %w", p, err, agentenv.ErrInvalid)
	}
	return nil
}

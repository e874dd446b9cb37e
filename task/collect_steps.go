package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
)

// TypeCollectFiles is the collect_files step's type.
const TypeCollectFiles = "collect_files"

// Bounds of a collect_files step: DefaultCollectBytes when max_bytes is 0, MaxCollectBytes the
// most max_bytes may say (a run's artifacts are its evidence, not its data sets).
const (
	DefaultCollectBytes = 16 << 20
	MaxCollectBytes     = 1 << 30
)

// MaxCollectFiles is the most files a collect_files step copies: a folder that holds more fails
// the step rather than filling the run's folder with what nobody will read.
const MaxCollectFiles = 10000

// ArtifactsDir is the folder of a run's folder that holds its collected files, one folder per
// collect_files step, beside its trajectory files.
const ArtifactsDir = "artifacts"

// Artifact is one file a collect_files step copied out of a sandbox, as its output
// "artifacts" (a JSON list) records it in the run document.
type Artifact struct {
	Path   string `json:"path"`   // in the sandbox, as the step named it
	Name   string `json:"name"`   // stored name: a slash path relative to the run's folder, artifacts/STEP/...
	File   string `json:"file"`   // where it is stored on this machine
	Size   int64  `json:"size"`   // bytes
	SHA256 string `json:"sha256"` // hex digest of its bytes
}

// Artifacts returns the artifacts a step record lists (none for other steps, or a record
// whose list does not parse).
func Artifacts(s agentenv.StepRecord) []Artifact {
	v := s.Outputs["artifacts"]
	if s.Type != TypeCollectFiles || v == "" {
		return nil
	}
	var out []Artifact
	if json.Unmarshal([]byte(v), &out) != nil {
		return nil
	}
	return out
}

// collectFiles copies named files out of a sandbox (a deploy_sandbox step's, or a component of
// a deploy_env step's env in container mode) into the run's folder, through the lifecycle
// manager's file reading, and lists them in its outputs. A path that ends in "/" names a
// folder: the regular files under it, as `find DIR -type f` run in the sandbox lists them
// (symbolic links are not followed), are collected each as a file named by its own path. A
// missing file or folder, more than MaxCollectFiles files, or files past max_bytes (summed),
// fail the step as the agent's error, since what the sandbox holds is the agent's work;
// nothing is ever cut short. With optional, a path is a file or a folder whatever its
// spelling, and one the sandbox does not have is skipped and listed in the output "missing"
// (the artifacts a Harbor task names, which may or may not be there).
type collectFiles struct {
	Sandbox   string   `yaml:"sandbox"`   // the deploy_sandbox step
	Env       string   `yaml:"env"`       // or the deploy_env step
	Component string   `yaml:"component"` // and its component
	Paths     []string `yaml:"paths" task:"required"`
	// MaxBytes bounds the step's files, summed; DefaultCollectBytes if 0.
	MaxBytes int64 `yaml:"max_bytes"`
	// Optional skips the paths the sandbox does not have, and takes a path without a trailing
	// "/" that names a folder as that folder.
	Optional bool `yaml:"optional"`
}

func (s *collectFiles) Check() error {
	switch {
	case (s.Sandbox == "") == (s.Env == ""):
		return errors.New("set sandbox (a deploy_sandbox step) or env and component (a deploy_env step's component), one of them")
	case s.Env != "" && s.Component == "":
		return errors.New("component: name the env's component to collect from, such as notes")
	case s.Sandbox != "" && s.Component != "":
		return errors.New("component: only with env")
	case len(s.Paths) == 0:
		return errors.New("paths: name at least one file or folder (ending in /) to collect")
	case s.MaxBytes < 0 || s.MaxBytes > MaxCollectBytes:
		return fmt.Errorf("max_bytes: want 1 to %d (1 GiB), or 0 for the default %d (16 MiB)", int64(MaxCollectBytes), DefaultCollectBytes)
	}
	seen := map[string]int{}
	for i, p := range s.Paths {
		name, err := artifactName(p)
		if err != nil {
			return fmt.Errorf("paths[%d]: %w", i, err)
		}
		if j, ok := seen[name]; ok {
			return fmt.Errorf("paths[%d]: %q is paths[%d] again", i, p, j)
		}
		seen[name] = i
	}
	return nil
}

// artifactName is the name under the step's folder that sandbox path p (a file, or a folder
// ending in "/") is stored as: p cleaned, relative. A path with a ".." element, an empty one or
// the root is refused.
func artifactName(p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) || strings.ContainsRune(p, '\n') {
		return "", errors.New("want a file's path in the sandbox, or a folder's ending in /")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("%q leaves its folder (a .. element): name the file by a path without one", p)
		}
	}
	name := strings.TrimPrefix(path.Clean("/"+p), "/")
	if name == "" {
		return "", fmt.Errorf("%q is the sandbox's root: name a file, or a folder below it ending in /", p)
	}
	return name, nil
}

// isFolder says whether a path of paths names a folder.
func isFolder(p string) bool { return strings.HasSuffix(p, "/") }

func (s *collectFiles) Refs() []Ref {
	if s.Env != "" {
		return []Ref{{"env", s.Env, envTypes}}
	}
	return []Ref{{"sandbox", s.Sandbox, sandboxTypes}}
}

func (s *collectFiles) Run(ctx context.Context, sc *scope) (Result, error) {
	record, err := sandboxOrComponent(sc, s.Sandbox, s.Env, s.Component)
	if err != nil {
		return Result{}, err
	}
	limit := s.MaxBytes
	if limit == 0 {
		limit = DefaultCollectBytes
	}
	paths, missing, err := s.files(ctx, sc, record)
	if err != nil {
		return Result{}, err
	}
	// Every file is read, and the bound checked, before any is stored: a step that fails
	// leaves no part of its files behind.
	type file struct {
		path, name string
		data       []byte
	}
	var files []file
	var total int64
	for _, f := range paths {
		data, err := sc.e.r.Manager.ReadFile(ctx, record, f.path)
		switch {
		case errors.Is(err, agentenv.ErrNotFound):
			return Result{}, withKind(agentenv.StepErrorAgent, fmt.Errorf("%s: %s: no such file in the sandbox: %w", f.field, f.path, err))
		case err != nil:
			return Result{}, fmt.Errorf("%s: read %s: %w", f.field, f.path, err)
		}
		if total += int64(len(data)); total > limit {
			return Result{}, withKind(agentenv.StepErrorAgent, fmt.Errorf("%s: %s (%d bytes) brings the step's files to %d bytes, past max_bytes %d: nothing stored, nothing cut short",
				f.field, f.path, len(data), total, limit))
		}
		files = append(files, file{f.path, path.Join(ArtifactsDir, sc.s.ID, f.name), data})
	}
	dir, err := sc.runDir()
	if err != nil {
		return Result{}, err
	}
	arts := make([]Artifact, 0, len(files))
	for _, f := range files {
		dst := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return Result{}, fmt.Errorf("store %s: %w", f.path, err)
		}
		if err := os.WriteFile(dst, f.data, 0o600); err != nil {
			return Result{}, fmt.Errorf("store %s: %w", f.path, err)
		}
		sum := sha256.Sum256(f.data)
		arts = append(arts, Artifact{Path: f.path, Name: f.name, File: dst, Size: int64(len(f.data)), SHA256: hex.EncodeToString(sum[:])})
	}
	list, err := json.Marshal(arts)
	if err != nil {
		return Result{}, err
	}
	out := map[string]string{"artifacts": string(list), "files": strconv.Itoa(len(arts)), "bytes": strconv.FormatInt(total, 10)}
	if s.Optional {
		m, err := json.Marshal(missing)
		if err != nil {
			return Result{}, err
		}
		out["missing"] = string(m)
	}
	return Result{Outputs: out}, nil
}

// collected is one file a collect_files step reads: its path in the sandbox, its name under
// the step's folder, and the field of the step that named it (paths[I]).
type collected struct{ path, name, field string }

// files lists the files the step collects, in the order of paths, each folder's files sorted
// by name; a file named twice (by itself and in a folder) is read once. With s.Optional, every
// path is listed as a folder is (a file lists itself), and those the sandbox lacks are
// returned as missing, never []string(nil).
func (s *collectFiles) files(ctx context.Context, sc *scope, record string) (out []collected, missing []string, err error) {
	missing = []string{}
	seen := map[string]bool{}
	add := func(c collected) error {
		if seen[c.name] {
			return nil
		}
		if len(out) == MaxCollectFiles {
			return withKind(agentenv.StepErrorAgent, fmt.Errorf("%s: more than %d files to collect: name fewer folders or files", c.field, MaxCollectFiles))
		}
		seen[c.name] = true
		out = append(out, c)
		return nil
	}
	for i, p := range s.Paths {
		field := fmt.Sprintf("paths[%d]", i)
		name, err := artifactName(p)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", field, err)
		}
		if !isFolder(p) && !s.Optional {
			if err := add(collected{p, name, field}); err != nil {
				return nil, nil, err
			}
			continue
		}
		listed, err := listFolder(ctx, sc, record, p)
		if s.Optional && errors.As(err, new(notListed)) {
			missing = append(missing, p)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", field, err)
		}
		for _, f := range listed {
			fname, err := artifactName(f)
			if err != nil || !strings.HasPrefix(fname+"/", name+"/") {
				return nil, nil, withKind(agentenv.StepErrorAgent, fmt.Errorf("%s: the sandbox listed %q in %s, which is not a file below it", field, f, p))
			}
			if err := add(collected{f, fname, field}); err != nil {
				return nil, nil, err
			}
		}
	}
	return out, missing, nil
}

// notListed is listFolder's error when find fails in the sandbox: no such file or folder, or
// one it may not read.
type notListed struct{ error }

func (e notListed) Unwrap() error { return e.error }

// listFolder returns the regular files under folder dir of the sandbox, sorted, as find run
// in the sandbox lists them (it does not follow symbolic links). A folder that is not there is
// the agent's error; a sandbox that cannot run commands is the step's.
func listFolder(ctx context.Context, sc *scope, record, dir string) ([]string, error) {
	res, err := sc.e.r.Manager.Exec(ctx, record, []string{"find", dir, "-type", "f", "-print0"})
	if err != nil {
		return nil, fmt.Errorf("list folder %s: %w", dir, err)
	}
	if res.ExitCode != 0 {
		return nil, withKind(agentenv.StepErrorAgent, notListed{fmt.Errorf("list folder %s: find exited %d: %s", dir, res.ExitCode, firstLine(res.Stderr))})
	}
	var files []string
	for _, f := range strings.Split(string(res.Stdout), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	if len(files) > MaxCollectFiles {
		return nil, withKind(agentenv.StepErrorAgent, fmt.Errorf("folder %s holds %d files, more than %d: name fewer folders or files", dir, len(files), MaxCollectFiles))
	}
	sort.Strings(files)
	return files, nil
}

// firstLine is the first line of b, trimmed, or "no output".
func firstLine(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if line == "" {
		return "no output"
	}
	return line
}

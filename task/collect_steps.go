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
// manager's file reading, and lists them in its outputs. A missing file, or files past
// max_bytes (summed), fail the step as the agent's error, since what the sandbox holds is the
// agent's work; nothing is ever cut short.
type collectFiles struct {
	Sandbox   string   `yaml:"sandbox"`   // the deploy_sandbox step
	Env       string   `yaml:"env"`       // or the deploy_env step
	Component string   `yaml:"component"` // and its component
	Paths     []string `yaml:"paths" task:"required"`
	// MaxBytes bounds the step's files, summed; DefaultCollectBytes if 0.
	MaxBytes int64 `yaml:"max_bytes"`
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
		return errors.New("paths: name at least one file to collect")
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

// artifactName is the name under the step's folder that sandbox path p is stored as: p
// cleaned, relative. A path with a ".." element, an empty one or the root is refused.
func artifactName(p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", errors.New("want a file's path in the sandbox")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("%q leaves its folder (a .. element): name the file by a path without one", p)
		}
	}
	name := strings.TrimPrefix(path.Clean("/"+p), "/")
	if name == "" {
		return "", fmt.Errorf("%q is a folder: name the files to collect", p)
	}
	return name, nil
}

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
	// Every file is read, and the bound checked, before any is stored: a step that fails
	// leaves no part of its files behind.
	type file struct {
		path, name string
		data       []byte
	}
	var files []file
	var total int64
	for i, p := range s.Paths {
		name, err := artifactName(p)
		if err != nil {
			return Result{}, fmt.Errorf("paths[%d]: %w", i, err)
		}
		data, err := sc.e.r.Manager.ReadFile(ctx, record, p)
		switch {
		case errors.Is(err, agentenv.ErrNotFound):
			return Result{}, withKind(agentenv.StepErrorAgent, fmt.Errorf("paths[%d]: %s: no such file in the sandbox: %w", i, p, err))
		case err != nil:
			return Result{}, fmt.Errorf("paths[%d]: read %s: %w", i, p, err)
		}
		if total += int64(len(data)); total > limit {
			return Result{}, withKind(agentenv.StepErrorAgent, fmt.Errorf("paths[%d]: %s (%d bytes) brings the step's files to %d bytes, past max_bytes %d: nothing stored, nothing cut short",
				i, p, len(data), total, limit))
		}
		files = append(files, file{p, path.Join(ArtifactsDir, sc.s.ID, name), data})
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
	return Result{Outputs: map[string]string{"artifacts": string(list), "files": strconv.Itoa(len(arts)), "bytes": strconv.FormatInt(total, 10)}}, nil
}

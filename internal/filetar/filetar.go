// Package filetar packs the files of a SandboxSpec into the tar archive a container engine
// unpacks into a container (`docker cp -`, CopyToContainer).
package filetar

import (
	"archive/tar"
	"bytes"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// Pack returns a tar archive that, unpacked at the directory base, makes each of files (keyed
// by absolute path, each below base) with its data, and the directories between base and it
// (mode 0755). A file is mode 0755 if it is an executable (an ELF binary or a #! script, as
// SandboxSpec.Files promises), else 0644. Entries are in path order, so the same files always
// make the same archive.
func Pack(base string, files map[string][]byte) ([]byte, error) {
	base = path.Clean(base)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, file := range slices.Sorted(maps.Keys(files)) {
		rel, ok := below(base, file)
		if !ok {
			return nil, fmt.Errorf("file %s: want an absolute path below %s", file, base)
		}
		var parents []string
		for d := path.Dir(rel); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
			dirs[d] = true
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
				return nil, fmt.Errorf("tar %s: %w", d, err)
			}
		}
		data := files[file]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: Mode(data), Size: int64(len(data))}); err != nil {
			return nil, fmt.Errorf("tar %s: %w", file, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", file, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	return buf.Bytes(), nil
}

// Mode is the mode a file with data gets: 0755 for an executable (an ELF binary or a #!
// script), else 0644.
func Mode(data []byte) int64 {
	if bytes.HasPrefix(data, []byte("\x7fELF")) || bytes.HasPrefix(data, []byte("#!")) {
		return 0o755
	}
	return 0o644
}

// below returns file relative to base, if file is an absolute path strictly below it.
func below(base, file string) (string, bool) {
	if !path.IsAbs(file) {
		return "", false
	}
	file = path.Clean(file)
	rel := strings.TrimPrefix(file, base)
	if base != "/" && (rel == file || !strings.HasPrefix(rel, "/")) {
		return "", false
	}
	rel = strings.TrimPrefix(rel, "/")
	return rel, rel != ""
}

// Package buildctx owns build contexts: the folder and Dockerfile an image is built from
// (agentenv.Build). It digests one (the same folder gives the same digest, any change another),
// and packs one as the tar an engine's builder takes, its Dockerfile rewritten so that every
// FROM takes its image through the build's base map and every stage carries the record's labels.
//
// A .dockerignore at the context's root is honoured, in both the digest and the tar, for the
// patterns of Docker's own syntax: '*', '?', '[…]', '**' for any number of folders, a leading
// '!' for an exception, the last matching line winning; a pattern that matches a folder leaves
// out everything under it. The Dockerfile and .dockerignore are always sent.
package buildctx

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
)

// DefaultDockerfile is the Dockerfile's path in its context when Build.Dockerfile is empty.
const DefaultDockerfile = "Dockerfile"

// MaxContextBytes bounds the files of a build context, which Pack holds in memory.
const MaxContextBytes = 1 << 30

// file is one entry of a build context, its path slash-separated and relative to the context.
type file struct {
	rel  string
	info fs.FileInfo
	link string // a symbolic link's target
}

// Dockerfile returns b's Dockerfile path in its context, slash-separated: Build.Dockerfile, or
// DefaultDockerfile. One that leaves the context is ErrInvalid.
func Dockerfile(b agentenv.Build) (string, error) {
	df := b.Dockerfile
	if df == "" {
		df = DefaultDockerfile
	}
	clean := path.Clean(filepath.ToSlash(df))
	if filepath.IsAbs(df) || clean == ".." || strings.HasPrefix(clean, "../") || clean == "." {
		return "", fmt.Errorf("dockerfile %q: want a file path inside the build context %s: %w", df, b.Context, agentenv.ErrInvalid)
	}
	return clean, nil
}

// name is how messages name b's Dockerfile: its context joined with its path.
func name(b agentenv.Build, df string) string {
	return filepath.Join(b.Context, filepath.FromSlash(df))
}

// Digest returns the hex sha256 of b: the paths, modes, link targets and contents of its
// context's files (those .dockerignore leaves in, and the Dockerfile), the Dockerfile's path,
// the build arguments and the base map.
func Digest(b agentenv.Build) (string, error) {
	df, err := Dockerfile(b)
	if err != nil {
		return "", err
	}
	files, err := walk(b, df)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	word := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	word("agentenv.build/v1")
	word(df)
	for _, m := range []map[string]string{b.Args, b.BaseMap} {
		word(fmt.Sprint(len(m)))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			word(k)
			word(m[k])
		}
	}
	word(fmt.Sprint(len(files)))
	for _, f := range files {
		word(f.rel)
		word(fmt.Sprintf("%o", f.info.Mode()))
		word(f.link)
		if f.info.Mode().IsRegular() {
			sum, err := fileSum(filepath.Join(b.Context, filepath.FromSlash(f.rel)))
			if err != nil {
				return "", fmt.Errorf("build context %s: %w", b.Context, err)
			}
			word(sum)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fileSum is the hex sha256 of the file at p.
func fileSum(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Pack returns b's context as an uncompressed tar for an engine's builder: the files Digest
// covers, the Dockerfile rewritten by Rewrite with labels.
func Pack(b agentenv.Build, labels map[string]string) ([]byte, error) {
	df, err := Dockerfile(b)
	if err != nil {
		return nil, err
	}
	src, err := readDockerfile(b, df)
	if err != nil {
		return nil, err
	}
	rewritten, err := Rewrite(name(b, df), src, b.Args, b.BaseMap, labels)
	if err != nil {
		return nil, err
	}
	files, err := walk(b, df)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, f := range files {
		hdr, err := tar.FileInfoHeader(f.info, f.link)
		if err != nil {
			return nil, fmt.Errorf("build context %s: %s: %w", b.Context, f.rel, err)
		}
		hdr.Name = f.rel
		if f.info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		// USTAR headers wherever they can say it all (whole-second times, short names):
		// BuildKit tells a context archive from a bare Dockerfile by reading one header in its
		// first 1 KiB, and a PAX record before the first header pushes that header out of it.
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		hdr.ModTime = hdr.ModTime.Truncate(time.Second)
		hdr.Format = tar.FormatUnknown
		var data []byte
		if f.rel == df {
			data = rewritten
			hdr.Size = int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("build context %s: %s: %w", b.Context, f.rel, err)
		}
		switch {
		case data != nil:
			_, err = tw.Write(data)
		case f.info.Mode().IsRegular():
			err = copyFile(tw, filepath.Join(b.Context, filepath.FromSlash(f.rel)))
		}
		if err != nil {
			return nil, fmt.Errorf("build context %s: %s: %w", b.Context, f.rel, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// readDockerfile reads b's Dockerfile df.
func readDockerfile(b agentenv.Build, df string) ([]byte, error) {
	src, err := os.ReadFile(filepath.Join(b.Context, filepath.FromSlash(df)))
	if err != nil {
		return nil, fmt.Errorf("build context %s: dockerfile %s: %w: %w", b.Context, df, err, agentenv.ErrInvalid)
	}
	return src, nil
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// walk lists b's context in path order: every folder, regular file and symbolic link that
// .dockerignore leaves in, and the Dockerfile df and .dockerignore always. A context that is
// not a folder, or a Dockerfile that is not a regular file, is ErrInvalid.
func walk(b agentenv.Build, df string) ([]file, error) {
	if b.Context == "" {
		return nil, fmt.Errorf("build context: want a folder: %w", agentenv.ErrInvalid)
	}
	st, err := os.Stat(b.Context)
	if err != nil || !st.IsDir() {
		if err == nil {
			err = errors.New("not a folder")
		}
		return nil, fmt.Errorf("build context %s: %w: %w", b.Context, err, agentenv.ErrInvalid)
	}
	if fi, err := os.Lstat(filepath.Join(b.Context, filepath.FromSlash(df))); err != nil || !fi.Mode().IsRegular() {
		if err == nil {
			err = errors.New("not a regular file")
		}
		return nil, fmt.Errorf("build context %s: dockerfile %s: %w: %w", b.Context, df, err, agentenv.ErrInvalid)
	}
	ign, err := readIgnore(b.Context)
	if err != nil {
		return nil, err
	}
	var files []file
	var total int64
	err = filepath.WalkDir(b.Context, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(b.Context, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		keep := rel == df || rel == ".dockerignore" || !ign.excludes(rel)
		if !keep {
			if d.IsDir() && !ign.reincludesUnder(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := file{rel: rel, info: info}
		switch m := info.Mode(); {
		case m.IsDir():
		case m.IsRegular():
			total += info.Size()
			if total > MaxContextBytes {
				return fmt.Errorf("more than %d bytes: %w", MaxContextBytes, agentenv.ErrInvalid)
			}
		case m&fs.ModeSymlink != 0:
			if f.link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return nil // sockets, devices, pipes: no builder takes them
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("build context %s: %w", b.Context, err)
	}
	return files, nil
}

// ignore is a .dockerignore's patterns, in order.
type ignore []pattern

type pattern struct {
	parts  []string // slash-separated segments; "**" matches any number of them
	negate bool
}

// readIgnore reads the .dockerignore at dir's root, if there is one.
func readIgnore(dir string) (ignore, error) {
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build context %s: %w", dir, err)
	}
	defer f.Close()
	var ign ignore
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var p pattern
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			p.negate, line = true, strings.TrimSpace(rest)
		}
		line = path.Clean(strings.TrimPrefix(filepath.ToSlash(line), "/"))
		for _, seg := range strings.Split(line, "/") {
			if _, err := path.Match(seg, ""); err != nil {
				return nil, fmt.Errorf("%s:%d: pattern %q: %w: %w", filepath.Join(dir, ".dockerignore"), n, sc.Text(), err, agentenv.ErrInvalid)
			}
		}
		if line == "." {
			continue
		}
		p.parts = strings.Split(line, "/")
		ign = append(ign, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("build context %s: .dockerignore: %w", dir, err)
	}
	return ign, nil
}

// excludes reports whether rel is left out: the last pattern that matches rel or a folder
// above it decides.
func (ign ignore) excludes(rel string) bool {
	segs := strings.Split(rel, "/")
	out := false
	for _, p := range ign {
		for i := 1; i <= len(segs); i++ {
			if match(p.parts, segs[:i]) {
				out = !p.negate
				break
			}
		}
	}
	return out
}

// reincludesUnder reports whether an exception could bring back something under the folder
// rel, so that the walk must go into it.
func (ign ignore) reincludesUnder(rel string) bool {
	for _, p := range ign {
		if p.negate && (slices.Contains(p.parts, "**") || len(p.parts) > strings.Count(rel, "/")+1) {
			return true
		}
	}
	return false
}

// match reports whether the pattern segments pat match the path segments segs exactly.
func match(pat, segs []string) bool {
	if len(pat) == 0 {
		return len(segs) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(segs); i++ {
			if match(pat[1:], segs[i:]) {
				return true
			}
		}
		return false
	}
	if len(segs) == 0 {
		return false
	}
	ok, _ := path.Match(pat[0], segs[0])
	return ok && match(pat[1:], segs[1:])
}

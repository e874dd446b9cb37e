package notes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envsdk"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// maxDerivedTitle is how many characters of a text's first line become its title.
const maxDerivedTitle = 80

// reset deletes every note and restarts ids at 1, so a loaded env numbers notes the same way
// every time.
func (st *store) reset(ctx context.Context) error {
	if _, err := st.pool.Exec(ctx, "TRUNCATE "+st.table+" RESTART IDENTITY"); err != nil {
		return fmt.Errorf("reset notes: %w", err)
	}
	return nil
}

// add inserts one note per part, all or none.
func (st *store) add(ctx context.Context, parts []envproto.Part) error {
	notes := make([]NoteInput, 0, len(parts))
	for i, p := range parts {
		if p.Kind == envproto.KindFile && p.File != nil && p.File.URI != "" {
			b, err := envsdk.ReadFile(ctx, nil, p.File)
			if err != nil {
				return &envproto.Error{Code: envproto.CodeInvalidParams, Message: fmt.Sprintf("parts[%d]: %v", i, err)}
			}
			f := *p.File
			f.Bytes, f.URI = b, ""
			p.File = &f
		}
		n, err := partNote(p)
		if err != nil {
			return &envproto.Error{Code: envproto.CodeInvalidParams, Message: fmt.Sprintf("parts[%d]: %v", i, err)}
		}
		notes = append(notes, n)
	}
	tx, err := st.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("add notes: %w", err)
	}
	defer cleanup.Do(ctx, rollbackTimeout, tx.Rollback) //nolint:errcheck // a no-op after commit
	for _, n := range notes {
		if _, err := st.insert(ctx, tx, n); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("add notes: commit: %w", err)
	}
	return nil
}

// partNote turns a part into a note: a data part is {title, body, tags} (other fields, such as
// the id and created_at that get exports, are ignored); a text part, or a UTF-8 file, is a body
// whose title is its first line (for a file, its name).
func partNote(p envproto.Part) (NoteInput, error) {
	switch p.Kind {
	case "data":
		var n NoteInput
		if err := json.Unmarshal(p.Data, &n); err != nil {
			return NoteInput{}, fmt.Errorf("want {title, body, tags}: %w", err)
		}
		if strings.TrimSpace(n.Title) == "" {
			n.Title = deriveTitle(n.Body)
		}
		return n, nil
	case "text":
		return NoteInput{Title: deriveTitle(p.Text), Body: p.Text}, nil
	case "file":
		if !utf8.Valid(p.File.Bytes) || bytes.IndexByte(p.File.Bytes, 0) >= 0 {
			return NoteInput{}, fmt.Errorf("file %q is not text", p.File.Name)
		}
		title := p.File.Name
		if title == "" {
			title = deriveTitle(string(p.File.Bytes))
		}
		return NoteInput{Title: title, Body: string(p.File.Bytes)}, nil
	}
	return NoteInput{}, fmt.Errorf("unknown kind %q", p.Kind)
}

// deriveTitle is the first non-blank line of text, cut to maxDerivedTitle characters, or
// "untitled".
func deriveTitle(text string) string {
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if r := []rune(line); len(r) > maxDerivedTitle {
			line = string(r[:maxDerivedTitle])
		}
		return line
	}
	return "untitled"
}

// get exports every note as a data part, by id. The query is ignored.
func (st *store) get(ctx context.Context, _ envproto.GetParams) ([]envproto.Part, error) {
	notes, err := st.query(ctx, "ORDER BY id")
	if err != nil {
		return nil, err
	}
	parts := make([]envproto.Part, 0, len(notes))
	for _, n := range notes {
		data, err := json.Marshal(n)
		if err != nil {
			return nil, fmt.Errorf("encode note %d: %w", n.ID, err)
		}
		parts = append(parts, envproto.Part{Kind: "data", Data: data})
	}
	return parts, nil
}

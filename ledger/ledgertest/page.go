package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/google/go-cmp/cmp"
)

// testPage walks run documents page by page, with each filter of a DocQuery.
func testPage(t *testing.T, l agentenv.Ledger) {
	ctx := t.Context()
	at := func(i int) time.Time { return base().Add(time.Duration(i) * time.Minute) }
	runs := []agentenv.Run{
		{ID: "r1", Task: "notes", Status: "completed", Created: at(1), Attrs: map[string]string{"episode": "1", "file": "a/task.yaml"}},
		{ID: "r2", Task: "notes", Status: "failed", Created: at(2), Attrs: map[string]string{"episode": "2", "file": "a/task.yaml"}},
		{ID: "r3", Task: "hello", Status: "completed", Created: at(3), Attrs: map[string]string{"episode": "1"}, Error: "100% Broken_Thing"},
		{ID: "r4", Task: "notes", Status: "running", Created: at(4), Attrs: map[string]string{"episode": "1", "file": "b/task.yaml"}},
		{ID: "r5", Task: "notes", Status: "completed", Created: at(4), Attrs: map[string]string{"episode": "2", "file": "b/task.yaml"}},
		{ID: "r6", Task: "hello", Status: "cancelled", Created: at(6)},
		{ID: "r7", Task: "notes", Status: "completed", Created: at(7), Attrs: map[string]string{"episode": "10"}},
	}
	for _, r := range runs {
		if err := l.Runs().Put(ctx, r); err != nil {
			t.Fatalf("Put(%s) = %v", r.ID, err)
		}
	}
	// walk follows the cursors with pages of limit and returns every page's ids.
	walk := func(q agentenv.DocQuery, limit int) [][]string {
		t.Helper()
		q.Limit = limit
		var pages [][]string
		for range 20 {
			p, err := l.Runs().Page(ctx, q)
			if err != nil {
				t.Fatalf("Page(%+v) = %v", q, err)
			}
			ids := []string{}
			for _, d := range p.Docs {
				ids = append(ids, d.ID)
			}
			pages = append(pages, ids)
			if p.Next == "" {
				return pages
			}
			q.Cursor = p.Next
		}
		t.Fatalf("Page(%+v): more than 20 pages", q)
		return nil
	}
	for _, tc := range []struct {
		name  string
		q     agentenv.DocQuery
		limit int
		want  [][]string
	}{
		{"newest first, ties in insertion order", agentenv.DocQuery{}, 3, [][]string{{"r7", "r6", "r5"}, {"r4", "r3", "r2"}, {"r1"}}},
		{"an exact last page has no next", agentenv.DocQuery{}, 7, [][]string{{"r7", "r6", "r5", "r4", "r3", "r2", "r1"}}},
		{"oldest first", agentenv.DocQuery{Oldest: true}, 4, [][]string{{"r1", "r2", "r3", "r4"}, {"r5", "r6", "r7"}}},
		{"states", agentenv.DocQuery{States: []string{"completed", "cancelled"}}, 2, [][]string{{"r7", "r6"}, {"r5", "r3"}, {"r1"}}},
		{"no such state", agentenv.DocQuery{States: []string{"none"}}, 2, [][]string{{}}},
		{"a field", agentenv.DocQuery{Fields: map[string]string{"attrs.episode": "1"}}, 2, [][]string{{"r4", "r3"}, {"r1"}}},
		{"two fields", agentenv.DocQuery{Fields: map[string]string{"attrs.file": "b/task.yaml", "task": "notes"}}, 5, [][]string{{"r5", "r4"}}},
		{"text ignores case and wildcards", agentenv.DocQuery{Text: "100% broken_"}, 5, [][]string{{"r3"}}},
		{"text that only wildcards would match", agentenv.DocQuery{Text: "1_0"}, 5, [][]string{{}}},
		{"from and to", agentenv.DocQuery{From: at(2), To: at(6)}, 10, [][]string{{"r5", "r4", "r3", "r2"}}},
		{"from, oldest first", agentenv.DocQuery{From: at(4), Oldest: true}, 2, [][]string{{"r4", "r5"}, {"r6", "r7"}}},
	} {
		if diff := cmp.Diff(tc.want, walk(tc.q, tc.limit)); diff != "" {
			t.Errorf("%s: pages (-want +got):\n%s", tc.name, diff)
		}
	}
	if p, err := l.Runs().Page(ctx, agentenv.DocQuery{}); err != nil || len(p.Docs) != len(runs) || p.Next != "" {
		t.Errorf("Page(no limit) = %d docs, next %q, %v; want all %d under the default limit", len(p.Docs), p.Next, err, len(runs))
	}
	if p, err := l.Runs().Page(ctx, agentenv.DocQuery{Limit: 1}); err != nil || p.Docs[0].Attrs["file"] != "" || p.Docs[0].Task != "notes" {
		t.Errorf("Page(limit 1) = %+v, %v; want r7 whole", p.Docs, err)
	}
	for _, c := range []string{"nonsense", "2031-01-01T00:00:00Z/x", "yesterday/3"} {
		if _, err := l.Runs().Page(ctx, agentenv.DocQuery{Cursor: c}); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("Page(cursor %q) = %v, want ErrInvalid", c, err)
		}
	}
	if _, err := l.Runs().Page(ctx, agentenv.DocQuery{Fields: map[string]string{"attrs..x": "1"}}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Page(field attrs..x) = %v, want ErrInvalid", err)
	}
	if p, err := l.Deployments().Page(ctx, agentenv.DocQuery{}); err != nil || len(p.Docs) != 0 {
		t.Errorf("Deployments().Page = %d docs, %v; want none: runs are another store", len(p.Docs), err)
	}
}

//go:build integration

package notes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/envsdk"
	"github.com/agentenv/agentenv/examples/notes"
)

// testDB connects to the integration PostgreSQL and returns the pool and a fresh schema name
// that is dropped at the end of the test. A missing DSN fails the test: the integration tag is
// the opt-in.
func testDB(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	dsn := os.Getenv("AGENTENV_TEST_POSTGRES_DSN")
	if dsn == "" {
		tb.Fatal("integration tests need PostgreSQL: set AGENTENV_TEST_POSTGRES_DSN (eval \"$(.ci/postgres.sh)\")")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := envsdk.OpenDB(ctx, dsn, nil)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	schema := fmt.Sprintf("notes_test_%d", time.Now().UnixNano())
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
		pool.Close()
	})
	return pool, schema
}

func titles(ns []notes.Note) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Title)
	}
	return out
}

func TestNotes(t *testing.T) {
	pool, schema := testDB(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	// Several servers starting at once on a fresh schema must all succeed.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			_, err := notes.New(ctx, pool, schema, nil)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent New: %v", err)
		}
	}
	s, err := notes.New(ctx, pool, schema, nil)
	if err != nil {
		t.Fatalf("New again: %v", err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL + envproto.MCPPath}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()

	var a, b, pct notes.AddResult
	envtest.CallJSON(t, ctx, cs, "add_note", map[string]any{"title": "Groceries", "body": "Milk and EGGS", "tags": []string{"home"}}, &a)
	envtest.CallJSON(t, ctx, cs, "add_note", map[string]any{"title": "Standup", "body": "ship the bridge"}, &b)
	envtest.CallJSON(t, ctx, cs, "add_note", map[string]any{"title": "Budget", "body": "cut 50% of costs"}, &pct)
	if a.ID == 0 || b.ID <= a.ID {
		t.Errorf("ids = %d, %d; want increasing non-zero ids", a.ID, b.ID)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"title": " "}})
	if err != nil || !res.IsError {
		t.Errorf("add_note with a blank title: %+v, %v; want a tool error", res, err)
	}

	var table []string
	rows, err := pool.Query(ctx, "SELECT title || ':' || array_to_string(tags, ',') FROM "+pgx.Identifier{schema, "notes"}.Sanitize()+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	if table, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if want := "Groceries:home,Standup:,Budget:"; strings.Join(table, ",") != want {
		t.Errorf("rows in %s.notes = %v, want %s", schema, table, want)
	}

	var list notes.NotesResult
	envtest.CallJSON(t, ctx, cs, "list_notes", map[string]any{"limit": 2}, &list)
	if got := strings.Join(titles(list.Notes), ","); got != "Groceries,Standup" {
		t.Errorf("list_notes limit 2 = %s, want Groceries,Standup", got)
	}
	envtest.CallJSON(t, ctx, cs, "search_notes", map[string]any{"query": "eggs"}, &list)
	if got := strings.Join(titles(list.Notes), ","); got != "Groceries" {
		t.Errorf("search eggs = %s, want Groceries", got)
	}
	envtest.CallJSON(t, ctx, cs, "search_notes", map[string]any{"query": "standup"}, &list)
	if got := strings.Join(titles(list.Notes), ","); got != "Standup" {
		t.Errorf("search standup = %s, want Standup (title, any case)", got)
	}
	envtest.CallJSON(t, ctx, cs, "search_notes", map[string]any{"query": "50%"}, &list)
	if got := strings.Join(titles(list.Notes), ","); got != "Budget" {
		t.Errorf("search 50%% = %s, want Budget only (%% is literal)", got)
	}
	var del notes.DeleteResult
	envtest.CallJSON(t, ctx, cs, "delete_note", map[string]any{"id": b.ID}, &del)
	if !del.Deleted {
		t.Error("delete_note: deleted = false, want true")
	}
	envtest.CallJSON(t, ctx, cs, "delete_note", map[string]any{"id": b.ID}, &del)
	if del.Deleted {
		t.Error("delete_note twice: deleted = true, want false")
	}

	// Data plane: reset, add data and text parts, get them back in id order.
	envtest.Data(t, ts.URL, envproto.MethodReset, nil)
	envtest.CallJSON(t, ctx, cs, "list_notes", map[string]any{}, &list)
	if len(list.Notes) != 0 {
		t.Errorf("list after reset = %v, want none", titles(list.Notes))
	}
	envtest.Data(t, ts.URL, envproto.MethodAdd, envproto.AddParams{Parts: []envproto.Part{
		{Kind: "data", Data: json.RawMessage(`{"title":"Loaded","body":"from data","tags":["a","b"]}`)},
		{Kind: "text", Text: "\n  First line of text  \nsecond line"},
		{Kind: "file", File: &envproto.FilePart{Name: "readme.md", Bytes: []byte("# hi")}},
	}})
	var got envproto.GetResult
	if err := json.Unmarshal(envtest.Data(t, ts.URL, envproto.MethodGet, nil), &got); err != nil {
		t.Fatal(err)
	}
	var exported []notes.Note
	for _, p := range got.Parts {
		var n notes.Note
		if p.Kind != "data" || json.Unmarshal(p.Data, &n) != nil {
			t.Fatalf("data/get part %+v, want a data part holding a note", p)
		}
		exported = append(exported, n)
	}
	if len(exported) != 3 ||
		exported[0].ID != 1 || exported[0].Title != "Loaded" || strings.Join(exported[0].Tags, ",") != "a,b" ||
		exported[1].ID != 2 || exported[1].Title != "First line of text" ||
		exported[2].Title != "readme.md" || exported[2].Body != "# hi" {
		t.Errorf("data/get = %+v, want Loaded, First line of text, readme.md with ids from 1", exported)
	}

	// The export loads back: reset then add what get returned gives the same notes.
	envtest.Data(t, ts.URL, envproto.MethodReset, nil)
	envtest.Data(t, ts.URL, envproto.MethodAdd, envproto.AddParams(got))
	var again envproto.GetResult
	if err := json.Unmarshal(envtest.Data(t, ts.URL, envproto.MethodGet, nil), &again); err != nil {
		t.Fatal(err)
	}
	if len(again.Parts) != 3 {
		t.Fatalf("round trip: %d parts, want 3", len(again.Parts))
	}
	for i := range again.Parts {
		var n notes.Note
		if err := json.Unmarshal(again.Parts[i].Data, &n); err != nil {
			t.Fatal(err)
		}
		if n.ID != exported[i].ID || n.Title != exported[i].Title || n.Body != exported[i].Body {
			t.Errorf("round trip note %d = %+v, want %+v", i, n, exported[i])
		}
	}
}

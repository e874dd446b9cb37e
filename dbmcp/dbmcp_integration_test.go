//go:build integration

package dbmcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/dbmcp"
	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envsdk"
	"github.com/agentenv/agentenv/examples/notes"
)

// call calls tool name and returns its result.
func call(tb testing.TB, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	tb.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return res
}

// decode decodes a successful result's structured content into out.
func decode(tb testing.TB, res *mcp.CallToolResult, out any) {
	tb.Helper()
	if res.IsError {
		tb.Fatalf("tool error: %v", res.Content)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		tb.Fatalf("decode %s: %v", raw, err)
	}
}

// errorText is the text of a tool error result.
func errorText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestDBMCP(t *testing.T) {
	dsn := os.Getenv("AGENTENV_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Fatal("integration tests need PostgreSQL: set AGENTENV_TEST_POSTGRES_DSN (eval \"$(.ci/postgres.sh)\")")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	pool, err := envsdk.OpenDB(ctx, dsn, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer pool.Close()
	schema := fmt.Sprintf("dbmcp_test_%d", time.Now().UnixNano())
	table := pgx.Identifier{schema, "notes"}.Sanitize()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	}()

	// The notes env owns the table; load two notes through its data plane.
	notesSrv, err := notes.New(ctx, pool, schema, nil)
	if err != nil {
		t.Fatalf("notes.New: %v", err)
	}
	nts := httptest.NewServer(notesSrv.Handler())
	defer nts.Close()
	add := `{"jsonrpc":"2.0","id":1,"method":"data/add","params":{"parts":[` +
		`{"kind":"data","data":{"title":"alpha","body":"one","tags":["x"]}},{"kind":"data","data":{"title":"beta","body":"two"}}]}}`
	resp, err := http.Post(nts.URL+envproto.DataPath, "application/json", bytes.NewReader([]byte(add)))
	if err != nil {
		t.Fatal(err)
	}
	var rpcResp envproto.Response
	err = json.NewDecoder(resp.Body).Decode(&rpcResp)
	resp.Body.Close()
	if err != nil || rpcResp.Error != nil {
		t.Fatalf("notes data/add: %+v, %v", rpcResp, err)
	}

	ts := httptest.NewServer(dbmcp.New(pool, nil).Handler())
	defer ts.Close()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL + envproto.MCPPath}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()

	var q dbmcp.QueryResult
	decode(t, call(t, ctx, cs, "query", map[string]any{"sql": "SELECT id, title, tags, created_at FROM " + table + " ORDER BY id"}), &q)
	if strings.Join(q.Columns, ",") != "id,title,tags,created_at" || len(q.Rows) != 2 || q.Truncated {
		t.Fatalf("query = %+v, want 4 columns and 2 rows", q)
	}
	if q.Rows[0][1] != "alpha" || q.Rows[1][1] != "beta" || q.Rows[0][0] != float64(1) {
		t.Errorf("query rows = %v, want (1, alpha) then beta", q.Rows)
	}
	if tags, ok := q.Rows[0][2].([]any); !ok || len(tags) != 1 || tags[0] != "x" {
		t.Errorf("tags column = %#v, want [x]", q.Rows[0][2])
	}
	if q.Command != "SELECT 2" {
		t.Errorf("command = %q, want SELECT 2", q.Command)
	}

	decode(t, call(t, ctx, cs, "query", map[string]any{"sql": "SELECT generate_series(1, 5) AS n, 1.5::numeric AS d, gen_random_uuid() AS u", "max_rows": 3}), &q)
	if len(q.Rows) != 3 || !q.Truncated {
		t.Errorf("query with max_rows 3 = %d rows, truncated %v; want 3, true", len(q.Rows), q.Truncated)
	}
	if u, ok := q.Rows[0][2].(string); !ok || len(u) != 36 {
		t.Errorf("uuid column = %#v, want a uuid string", q.Rows[0][2])
	}

	var tables dbmcp.TablesResult
	decode(t, call(t, ctx, cs, "list_tables", map[string]any{"schema": schema}), &tables)
	if len(tables.Tables) != 1 || tables.Tables[0] != (dbmcp.Table{Schema: schema, Name: "notes", Type: "BASE TABLE"}) {
		t.Errorf("list_tables = %+v, want %s.notes", tables, schema)
	}
	var desc dbmcp.TableDescription
	decode(t, call(t, ctx, cs, "describe_table", map[string]any{"schema": schema, "table": "notes"}), &desc)
	var cols []string
	for _, c := range desc.Columns {
		cols = append(cols, c.Name+" "+c.Type)
	}
	if got := strings.Join(cols, ","); got != "id bigint,title text,body text,tags ARRAY,created_at timestamp with time zone" ||
		strings.Join(desc.PrimaryKey, ",") != "id" {
		t.Errorf("describe_table = %s pk %v, want the notes columns and pk id", got, desc.PrimaryKey)
	}
	if res := call(t, ctx, cs, "describe_table", map[string]any{"schema": schema, "table": "nope"}); !res.IsError {
		t.Errorf("describe_table of a missing table: want a tool error, got %v", res.StructuredContent)
	}

	writes := []string{
		"DELETE FROM " + table,
		"INSERT INTO " + table + " (title) VALUES ('sneaky')",
		"COMMIT; DELETE FROM " + table,
		"WITH d AS (DELETE FROM " + table + " RETURNING id) SELECT count(*) FROM d",
		"DROP TABLE " + table,
	}
	for _, sql := range writes {
		res := call(t, ctx, cs, "query", map[string]any{"sql": sql})
		if !res.IsError {
			t.Errorf("query %q: want a tool error, got %v", sql, res.StructuredContent)
		}
		if sql == writes[0] && !strings.Contains(errorText(res), "read-only") {
			t.Errorf("query %q: error %q does not say the transaction is read-only", sql, errorText(res))
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil || n != 2 {
		t.Errorf("rows after refused writes = %d (err %v), want 2", n, err)
	}
}

package dbmcp

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentenv/agentenv/internal/cleanup"
)

// rollbackTimeout bounds the rollback that ends every read-only transaction.
const rollbackTimeout = 5 * time.Second

// QueryInput is the input of query.
type QueryInput struct {
	SQL     string `json:"sql" jsonschema:"one SQL statement; it runs in a READ ONLY transaction"`
	MaxRows int    `json:"max_rows,omitempty" jsonschema:"at most this many rows are returned; default 200, at most 1000"`
}

// QueryResult is the result of query.
type QueryResult struct {
	Columns []string `json:"columns"`
	Rows    [][]any  `json:"rows"`
	// Truncated reports whether the statement had more rows than were returned.
	Truncated bool `json:"truncated"`
	// Command is the statement's command tag, such as "SELECT 3".
	Command string `json:"command"`
}

// query runs one statement in a READ ONLY transaction that is rolled back. The extended
// protocol takes a single statement only, so "COMMIT; DELETE ..." cannot escape the transaction.
func (d *db) query(ctx context.Context, in QueryInput) (QueryResult, error) {
	if strings.TrimSpace(in.SQL) == "" {
		return QueryResult{}, errors.New("sql is empty")
	}
	maxRows := in.MaxRows
	if maxRows <= 0 {
		maxRows = DefaultMaxRows
	}
	maxRows = min(maxRows, MaxRows)

	var out QueryResult
	err := d.readOnly(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, in.SQL, pgx.QueryExecModeDescribeExec)
		if err != nil {
			return err
		}
		defer rows.Close()
		for _, f := range rows.FieldDescriptions() {
			out.Columns = append(out.Columns, f.Name)
		}
		out.Rows = [][]any{}
		for rows.Next() {
			if len(out.Rows) == maxRows {
				out.Truncated = true
				break
			}
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			for i, v := range vals {
				vals[i] = jsonValue(v)
			}
			out.Rows = append(out.Rows, vals)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		out.Command = rows.CommandTag().String()
		return nil
	})
	if err != nil {
		return QueryResult{}, fmt.Errorf("query: %w", err)
	}
	if out.Columns == nil {
		out.Columns = []string{}
	}
	return out, nil
}

// readOnly runs f in a READ ONLY transaction with a statement timeout and rolls it back.
func (d *db) readOnly(ctx context.Context, f func(pgx.Tx) error) error {
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer cleanup.Do(ctx, rollbackTimeout, tx.Rollback) //nolint:errcheck // nothing to keep
	timeout := fmt.Sprintf("SET LOCAL statement_timeout = %d", StatementTimeout.Milliseconds())
	if _, err := tx.Exec(ctx, timeout); err != nil {
		return fmt.Errorf("set statement timeout: %w", err)
	}
	return f(tx)
}

// jsonValue turns a value pgx decoded into one that marshals to readable JSON.
func jsonValue(v any) any {
	switch v := v.(type) {
	case nil, bool, string, int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, time.Time:
		return v
	case float32:
		return jsonValue(float64(v))
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Sprint(v)
		}
		return v
	case []byte:
		return `\x` + hex.EncodeToString(v)
	case [16]byte: // uuid
		h := hex.EncodeToString(v[:])
		return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonValue(e)
		}
		return out
	case map[string]any:
		return v // json and jsonb
	case json.Marshaler:
		if _, err := v.MarshalJSON(); err == nil {
			return v
		}
	case fmt.Stringer:
		return v.String()
	}
	if _, err := json.Marshal(v); err == nil {
		return v
	}
	return fmt.Sprint(v)
}

// Table is one table or view.
type Table struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	Type   string `json:"type"` // "BASE TABLE", "VIEW", ...
}

// TablesResult is the result of list_tables.
type TablesResult struct {
	Tables []Table `json:"tables"`
}

// systemSchemas is the SQL condition that leaves out PostgreSQL's own schemas.
const systemSchemas = `table_schema NOT IN ('pg_catalog', 'information_schema') AND table_schema NOT LIKE 'pg\_toast%' AND table_schema NOT LIKE 'pg\_temp%'`

// listTables lists the tables outside the system schemas, optionally in one schema.
func (d *db) listTables(ctx context.Context, in struct {
	Schema string `json:"schema,omitempty" jsonschema:"only this schema; empty lists all"`
}) (TablesResult, error) {
	out := TablesResult{Tables: []Table{}}
	err := d.readOnly(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT table_schema, table_name, table_type FROM information_schema.tables
			WHERE `+systemSchemas+` AND ($1 = '' OR table_schema = $1) ORDER BY 1, 2`, in.Schema)
		if err != nil {
			return err
		}
		tables, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Table])
		if err != nil {
			return err
		}
		out.Tables = append(out.Tables, tables...)
		return nil
	})
	if err != nil {
		return TablesResult{}, fmt.Errorf("list tables: %w", err)
	}
	return out, nil
}

// DescribeInput is the input of describe_table.
type DescribeInput struct {
	Schema string `json:"schema,omitempty" jsonschema:"the table's schema; empty finds it in any non-system schema"`
	Table  string `json:"table" jsonschema:"the table's name"`
}

// Column is one column of a table.
type Column struct {
	Name     string  `json:"name"`
	Type     string  `json:"type"`
	Nullable bool    `json:"nullable"`
	Default  *string `json:"default,omitempty"`
}

// TableDescription is the result of describe_table.
type TableDescription struct {
	Schema     string   `json:"schema"`
	Table      string   `json:"table"`
	Columns    []Column `json:"columns"`
	PrimaryKey []string `json:"primary_key"`
}

// describeTable returns the columns and primary key of one table.
func (d *db) describeTable(ctx context.Context, in DescribeInput) (TableDescription, error) {
	if in.Table == "" {
		return TableDescription{}, errors.New("table is empty")
	}
	var out TableDescription
	err := d.readOnly(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT DISTINCT table_schema FROM information_schema.tables
			WHERE `+systemSchemas+` AND table_name = $1 AND ($2 = '' OR table_schema = $2) ORDER BY 1`, in.Table, in.Schema)
		if err != nil {
			return err
		}
		schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		switch len(schemas) {
		case 0:
			return fmt.Errorf("no table %q", in.Table)
		case 1:
		default:
			return fmt.Errorf("table %q is in several schemas (%s); name one", in.Table, strings.Join(schemas, ", "))
		}
		out.Schema, out.Table = schemas[0], in.Table

		rows, err = tx.Query(ctx, `SELECT column_name, data_type, is_nullable = 'YES', column_default
			FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`,
			out.Schema, out.Table)
		if err != nil {
			return err
		}
		if out.Columns, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Column]); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT k.column_name FROM information_schema.table_constraints c
			JOIN information_schema.key_column_usage k
			  ON k.constraint_schema = c.constraint_schema AND k.constraint_name = c.constraint_name
			WHERE c.constraint_type = 'PRIMARY KEY' AND c.table_schema = $1 AND c.table_name = $2
			ORDER BY k.ordinal_position`, out.Schema, out.Table)
		if err != nil {
			return err
		}
		out.PrimaryKey, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return TableDescription{}, fmt.Errorf("describe table: %w", err)
	}
	if out.PrimaryKey == nil {
		out.PrimaryKey = []string{}
	}
	return out, nil
}

package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
)

// migrations holds the schema, one file per version, named NNNN_what.sql and applied in order.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrate applies the migrations newer than the database's version, in one write transaction,
// so that two processes opening a new file at once do not both create the tables.
func (l *Ledger) migrate(ctx context.Context) error {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return l.write(ctx, func(tx *sql.Tx) error {
		const ddl = `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied TEXT NOT NULL)`
		if _, err := tx.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		var current int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		newest := 0
		for _, name := range files { // fs.Glob returns names sorted
			v, err := strconv.Atoi(strings.SplitN(path.Base(name), "_", 2)[0])
			if err != nil {
				return fmt.Errorf("migration %s: want NNNN_name.sql", name)
			}
			newest = v
			if v <= current {
				continue
			}
			body, err := migrations.ReadFile(name)
			if err != nil {
				return fmt.Errorf("migration %s: %w", name, err)
			}
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return fmt.Errorf("migration %s: %w", name, err)
			}
			now := time.Now().UTC().Format(timeLayout)
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied) VALUES (?, ?)`, v, now); err != nil {
				return fmt.Errorf("migration %s: %w", name, err)
			}
			l.log.Debug("ledger schema migrated", "version", v)
		}
		if current > newest {
			return fmt.Errorf("schema version %d is newer than this agentenv knows (%d); upgrade agentenv", current, newest)
		}
		return nil
	})
}

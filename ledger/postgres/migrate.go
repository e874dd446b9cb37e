package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrations holds the schema, one file per version, named NNNN_what.sql and applied in order.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrateLock is the first key of the advisory lock taken while migrating; the second is the
// hash of the schema, so ledgers in different schemas migrate independently.
const migrateLock = 0x6167656e // "agen"

// migrate applies the migrations newer than the database's version in one transaction, under
// an advisory lock released when it ends.
func (l *Ledger) migrate(ctx context.Context) error {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return l.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(coalesce(current_schema(), '')))`, int32(migrateLock)); err != nil {
			return fmt.Errorf("lock for migration: %w", err)
		}
		const ddl = `CREATE TABLE IF NOT EXISTS agentenv_schema_migrations (
			version INTEGER PRIMARY KEY, applied TIMESTAMPTZ NOT NULL DEFAULT now())`
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM agentenv_schema_migrations`).Scan(&current); err != nil {
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
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return fmt.Errorf("migration %s: %w", name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO agentenv_schema_migrations (version) VALUES ($1)`, v); err != nil {
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

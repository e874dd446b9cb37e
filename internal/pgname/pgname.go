// Package pgname names what the state store makes in PostgreSQL: a database per record and
// login roles per database. The pgstore provider makes them and deploy connects to and
// snapshots them; both derive the names here, so that deploy needs no provider.
package pgname

import (
	"crypto/sha256"
	"encoding/hex"
)

// DatabasePrefix begins the name of every database the state store makes; the record id
// follows.
const DatabasePrefix = "agentenv-"

// DefaultTemplate is the template of a database whose spec names none: PostgreSQL's pristine
// one.
const DefaultTemplate = "template0"

// Database returns the name of the database made for record id.
func Database(record string) string { return DatabasePrefix + record }

// Role returns the cluster-wide name of login role name of database: a prefix drawn from the
// database's name, so that the database's teardown finds every role made for it, and at most
// 63 bytes (PostgreSQL's limit, past which it would cut names and let two collide).
func Role(database, name string) string {
	prefix := RolePrefix(database)
	if len(prefix)+len(name) <= 63 {
		return prefix + name
	}
	h := sha256.Sum256([]byte(name))
	return prefix + name[:63-len(prefix)-9] + "_" + hex.EncodeToString(h[:4])
}

// RolePrefix begins the name of every login role made for database.
func RolePrefix(database string) string {
	h := sha256.Sum256([]byte(database))
	return "ae" + hex.EncodeToString(h[:6]) + "_"
}

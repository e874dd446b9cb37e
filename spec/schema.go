package spec

import _ "embed"

// EnvSchema is the JSON Schema (draft 2020-12) of env files, as published to users for editor
// completion and CI checks. It describes the same fields Load accepts; Load also checks what a
// schema cannot (unique server names, files that exist, database: true with a service_db).
// Callers must not modify it.
//
//go:embed env.schema.json
var EnvSchema []byte

// Package setting is the shape of one of agentenv's settings, so that the packages that read a
// setting (each provider) can declare it beside the code that reads it, and package config can
// gather them all without those packages importing config.
package setting

// Key describes one setting.
type Key struct {
	Name    string // dotted, as in the file: "ledger.dsn"
	Default string
	Doc     string
	Secret  bool // mask when shown
}

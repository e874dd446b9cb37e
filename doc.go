// Package agentenv is the vocabulary of agentenv: the sandbox, the provider that makes it, the
// ledger that remembers it, and the errors they speak. It imports only the standard library;
// every other package of the module builds on it.
//
// The lifecycle of every sandbox is written to a [Ledger] before any provider call is made:
//
//	creating ──► live ──► terminating ──► gone
//	   │                      │
//	   ▼                      ▼
//	abandoned          terminate_failed ──► (retried by gc) ──► gone
//
// A record is created in state [StateCreating] with a client-generated id that the provider uses
// as the sandbox's name and label, so a sandbox whose create response was lost (or whose creator
// was killed) is still found by listing labels. Package lifecycle implements these rules once for
// every [Provider].
package agentenv

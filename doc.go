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
//
// The nouns, a file each:
//
//   - the sandbox: [SandboxSpec] says what to create, [Sandbox] is what a provider reports, and
//     labels and [Role]s mark it (sandbox.go);
//   - the provider: [Provider] and the optional abilities beyond it, [Networker], [VMHost],
//     [Imager], [Volumer], [Execer] and the rest, listed by [AbilitiesOf] (provider.go), and
//     [Intercept], which wraps every call of one (intercept.go);
//   - the record: [Record], its [State]s and [Kind]s, and the [Owner] working on it
//     (record.go); the [Receipt] of a verified teardown (receipt.go);
//   - the ledger: [Ledger] keeps the records and, as [DocStore]s, the documents (ledger.go):
//     a [Deployment] per deployed env (deployment.go) and a [Run] per episode, with its
//     [StepRecord]s (run.go);
//   - the errors every package matches with errors.Is (errors.go).
package agentenv

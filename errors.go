package agentenv

import "errors"

// Error kinds. Implementations wrap them with context and callers test them with errors.Is.
var (
	// ErrNotFound means the named object does not exist: no record with that id, or no sandbox
	// with that id on the provider.
	ErrNotFound = errors.New("not found")

	// ErrGone means the sandbox existed but has finished: it exited, was killed, or timed out.
	// Terminate treats it as success; Get reports it, since a finished sandbox cannot be
	// reattached to.
	ErrGone = errors.New("sandbox finished")

	// ErrUnavailable means the backend cannot serve the request now: the engine does not answer,
	// the cloud refuses for capacity or rate, credentials are missing. A chain falls through to
	// its next member on this error only.
	ErrUnavailable = errors.New("provider unavailable")

	// ErrInvalid means the request itself is wrong (a malformed label, an unknown image, a bad
	// spec) and retrying it elsewhere will not help.
	ErrInvalid = errors.New("invalid request")

	// ErrConflict means the object is not in a state that allows the operation, for example a
	// ledger update that lost a race with another writer.
	ErrConflict = errors.New("conflict")
)

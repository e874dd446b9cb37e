package agentenv

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// State is where a record is in its lifecycle.
type State string

// Record states. A record moves creating -> live -> terminating -> gone; terminate_failed is
// retried by gc, and abandoned (the outcome of a create is unknown) is resolved by gc listing
// the provider by label. Gone records stay as history.
const (
	StateCreating        State = "creating"
	StateLive            State = "live"
	StateTerminating     State = "terminating"
	StateTerminateFailed State = "terminate_failed"
	StateAbandoned       State = "abandoned"
	StateGone            State = "gone"
)

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	switch s {
	case StateCreating, StateLive, StateTerminating, StateTerminateFailed, StateAbandoned, StateGone:
		return true
	}
	return false
}

// Kind is what a record stands for on its provider.
type Kind string

// Record kinds. Networks are torn down after the sandboxes of the same deployment.
const (
	KindSandbox Kind = "sandbox" // a container, pod, or cloud sandbox
	KindVM      Kind = "vm"      // one sandbox hosting a whole stack
	KindNetwork Kind = "network" // a private network of a deployment
	// KindInVM is a container a deploy adds to the stack of a VM it did not make (--into). Its
	// record's Attrs[AttrVM] names the VM's record and Attrs[AttrInVMName] the container's name
	// in that VM; its id is InVMRecordID of the two, so that one name in one VM has one record.
	KindInVM Kind = "in_vm"
	// KindImage is an image a provider built (Imager), such as a snapshot of a service DB; like
	// networks, images are torn down after the sandboxes that may run them. Its record's
	// Attrs[AttrImageRef] is the reference that runs it.
	KindImage Kind = "image"
)

// Attributes of an in_vm record.
const (
	AttrVM       = "vm"         // the record id of the VM the container is in
	AttrInVMName = "in_vm.name" // the container's name in the VM's stack
)

// AttrImageRef is the attribute of an image record that holds the reference SandboxSpec.Image
// takes to run it (Sandbox.Image of the build).
const AttrImageRef = "image.ref"

// InVMRecordID is the record id of the container name in the VM with record id vm: one name in
// one VM has one record id, so that claiming it is one insert.
func InVMRecordID(vm, name string) string { return vm + "." + name }

// Owner names the process that owns a record while it works on it. On the same host an owner is
// dead once no process has its pid and start time; from another host, once its lease passed.
// "The same host" means the same machine boot and PID namespace, never merely the same host
// name: two containers with one host name are two hosts.
type Owner struct {
	Host  string // hostname@id, id drawn from the boot and the PID namespace (see lifecycle.CurrentOwner)
	PID   int    // process id
	Start int64  // process start time, in clock ticks since boot (Linux /proc/PID/stat field 22)
}

// IsZero reports whether o names no owner (the record was handed to its expiry).
func (o Owner) IsZero() bool { return o == Owner{} }

// String formats o as "host/pid/start", the form of LabelOwner.
func (o Owner) String() string {
	if o.IsZero() {
		return ""
	}
	return fmt.Sprintf("%s/%d/%d", o.Host, o.PID, o.Start)
}

// ParseOwner parses the form of Owner.String; the empty string is the zero Owner.
func ParseOwner(s string) (Owner, error) {
	if s == "" {
		return Owner{}, nil
	}
	i := strings.LastIndexByte(s, '/')
	j := strings.LastIndexByte(s[:max(i, 0)], '/')
	if i < 0 || j < 0 {
		return Owner{}, fmt.Errorf("owner %q: want host/pid/start: %w", s, ErrInvalid)
	}
	pid, err1 := strconv.Atoi(s[j+1 : i])
	start, err2 := strconv.ParseInt(s[i+1:], 10, 64)
	if err1 != nil || err2 != nil {
		return Owner{}, fmt.Errorf("owner %q: want host/pid/start: %w", s, ErrInvalid)
	}
	return Owner{Host: s[:j], PID: pid, Start: start}, nil
}

// Record is the ledger's memory of one sandbox, VM or network. It is written before the provider
// is called and updated at every transition.
type Record struct {
	ID         string    // client-generated; the sandbox's name and LabelRecord
	Kind       Kind      // sandbox, vm, network, in_vm or image
	Provider   string    // the provider (chain member) that makes it; teardown goes there
	SandboxID  string    // the provider's id, once known
	Image      string    // what it runs, for messages
	Run        string    // run id, if any
	Deployment string    // deployment id, if any
	Role       Role      // the part it plays in its deployment; empty for a bare sandbox
	State      State     // where it is in its lifecycle
	Owner      Owner     // who works on it now; zero once handed to its expiry
	LeaseUntil time.Time // the owner's lease; renewed while the owner lives
	Expires    time.Time // after this, gc removes it whoever owns it
	Error      string    // the last error, for terminate_failed and abandoned
	Labels     map[string]string
	Attrs      map[string]string // endpoints and other facts for display; never secrets
	Created    time.Time
	Updated    time.Time
}

// Validate reports whether r can be written: it needs an id and a defined state. Every Ledger
// refuses an invalid record with an error wrapping ErrInvalid.
func (r Record) Validate() error {
	if r.ID == "" {
		return fmt.Errorf("empty record id: %w", ErrInvalid)
	}
	if !r.State.Valid() {
		return fmt.Errorf("state %q: %w", r.State, ErrInvalid)
	}
	return nil
}

// Filter selects records. Zero fields match everything.
type Filter struct {
	States     []State
	Run        string
	Deployment string
	Provider   string
	Owner      *Owner // records owned by exactly this owner
}

// Outcome is what a teardown did to one sandbox.
type Outcome string

// Teardown outcomes. Terminated and AlreadyGone both count as down.
const (
	OutcomeTerminated  Outcome = "terminated"
	OutcomeAlreadyGone Outcome = "already_gone"
	OutcomeFailed      Outcome = "failed"       // the terminate returned an error; see Reason
	OutcomeStillListed Outcome = "still_listed" // the provider still lists it after the teardown
	OutcomeLeft        Outcome = "left"         // not attempted: the teardown was stopped first
)

// Down reports whether o means the sandbox is no longer running.
func (o Outcome) Down() bool { return o == OutcomeTerminated || o == OutcomeAlreadyGone }

// ReceiptItem is one sandbox's line in a Receipt.
type ReceiptItem struct {
	Record    string  `json:"record"`
	SandboxID string  `json:"sandbox_id,omitempty"`
	Provider  string  `json:"provider"`
	Kind      Kind    `json:"kind"`
	Role      Role    `json:"role,omitempty"`
	Outcome   Outcome `json:"outcome"`
	Reason    string  `json:"reason,omitempty"`
}

// Receipt is the verified result of a teardown: what each sandbox became, checked by listing
// the providers again after the terminates.
type Receipt struct {
	Items    []ReceiptItem `json:"items"`
	Started  time.Time     `json:"started"`
	Finished time.Time     `json:"finished"`
}

// Clean reports whether every sandbox in the receipt is down.
func (r Receipt) Clean() bool {
	for _, it := range r.Items {
		if !it.Outcome.Down() {
			return false
		}
	}
	return true
}

// Count returns how many items have outcome o.
func (r Receipt) Count(o Outcome) int {
	n := 0
	for _, it := range r.Items {
		if it.Outcome == o {
			n++
		}
	}
	return n
}

// Ledger records every sandbox before it is created, and every transition after. Implementations
// must be safe for concurrent use by several goroutines and by several processes sharing the same
// database. Records are never deleted; gone records stay as history.
type Ledger interface {
	// Put inserts r, or replaces the record with r.ID. It sets Updated (and Created, if zero).
	Put(ctx context.Context, r Record) error

	// Insert writes r only if no record has r.ID, atomically with respect to every other
	// writer, so that of several callers inserting one id exactly one succeeds (a claim). It sets
	// Updated (and Created, if zero). An id that is taken is an error wrapping ErrConflict.
	Insert(ctx context.Context, r Record) error

	// Get returns the record with id, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (Record, error)

	// Update reads the record with id, applies fn to it and writes it back, atomically with
	// respect to every other writer, and returns what it wrote. If fn returns an error, nothing
	// is written and Update returns that error. An absent id is an error wrapping ErrNotFound.
	Update(ctx context.Context, id string, fn func(*Record) error) (Record, error)

	// List returns the records matching f, oldest first.
	List(ctx context.Context, f Filter) ([]Record, error)

	// RenewLease sets LeaseUntil to until on every record owned by owner that is not gone, and
	// returns how many it renewed.
	RenewLease(ctx context.Context, owner Owner, until time.Time) (int, error)

	// Deployments returns the store of deployment documents in the same database.
	Deployments() DocStore[Deployment]

	// Runs returns the store of run documents in the same database.
	Runs() DocStore[Run]

	// Close releases the database. Calls after Close fail.
	Close() error
}

// Doc is what a DocStore keeps: a JSON document with an id and a state for filtering, and a
// creation time that orders listings (zero: the time of its first Put stands in).
type Doc interface {
	DocID() string
	DocState() string
	DocCreated() time.Time
}

// DocStore keeps JSON documents (deployments, runs) beside the records. It is safe for concurrent
// use by several goroutines and processes.
type DocStore[T Doc] interface {
	// Put inserts or replaces the document with d.DocID().
	Put(ctx context.Context, d T) error
	// Get returns the document with id, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (T, error)
	// List returns documents whose state is one of states (all when empty), newest first, at
	// most limit of them (all when limit <= 0).
	List(ctx context.Context, states []string, limit int) ([]T, error)
	// Page returns one page of the documents q selects, in creation order (newest first unless
	// q.Oldest), and the cursor of the page after it. It walks an index on the creation time,
	// so a page costs about the same with ten or ten thousand documents; the Fields and Text
	// filters read the documents the walk passes over. A malformed cursor is an error wrapping
	// ErrInvalid.
	Page(ctx context.Context, q DocQuery) (DocPage[T], error)
}

// DocQuery selects a page of documents. Zero fields select everything.
type DocQuery struct {
	States []string // in one of these states
	// Fields selects documents whose string field at each dotted JSON path ("task",
	// "attrs.episode") equals the value. A path element cannot contain a dot.
	Fields map[string]string
	Text   string    // whose JSON text contains this, ignoring ASCII case (a search box)
	From   time.Time // created at or after
	To     time.Time // created before
	Oldest bool      // oldest first
	Cursor string    // continue after the page whose Next this is
	Limit  int       // at most this many; DefaultPageLimit if <= 0
}

// DefaultPageLimit is the page size of a DocQuery without a limit.
const DefaultPageLimit = 100

// DocPage is one page of a DocQuery.
type DocPage[T Doc] struct {
	Docs []T
	Next string // the cursor of the next page; empty on the last page
}

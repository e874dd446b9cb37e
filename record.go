package agentenv

import (
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

// NotGone returns the states of records whose sandbox may still exist: every state but gone.
// Listing them is how gc, the explorer and `ledger ls` find what is not yet torn down.
func NotGone() []State {
	return []State{StateCreating, StateLive, StateTerminating, StateTerminateFailed, StateAbandoned}
}

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

// Record kinds. Networks, images and volumes are torn down after the sandboxes of the same
// deployment or run.
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
	// KindVolume is a volume a provider made (Volumer), which sandboxes of the same provider
	// mount (SandboxSpec.Mounts) to share files; like networks, volumes are torn down after the
	// sandboxes that mount them.
	KindVolume Kind = "volume"
)

// Attributes of an in_vm record.
const (
	AttrVM       = "vm"         // the record id of the VM the container is in
	AttrInVMName = "in_vm.name" // the container's name in the VM's stack
)

// AttrImageRef is the attribute of an image record that holds the reference SandboxSpec.Image
// takes to run it (Sandbox.Image of the build).
const AttrImageRef = "image.ref"

// AttrCreateTimeout is the attribute of a record whose create has a bound of its own, longer
// or shorter than the manager's (an image build's), as a Go duration: how long gc treats the
// create of a dead creator as possibly still running.
const AttrCreateTimeout = "create.timeout"

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
	Kind       Kind      // sandbox, vm, network, in_vm, image or volume
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

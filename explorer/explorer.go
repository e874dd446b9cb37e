// Package explorer serves the agentenv explorer: web pages and a JSON read API under /api/v1/
// over the ledger's runs, run groups, episodes, trajectories, deployments and records, with
// live updates by server-sent events, and buttons that start and cancel runs, tear down
// deployments and run gc through the same code the CLI calls (injected as small interfaces, so
// this package holds no provider wiring). README.md documents the API and the security model.
package explorer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/task"
)

// RunRequest is what the start form asks for: a task and how to run it.
type RunRequest struct {
	Task        string `json:"task"`        // a task file or folder, or "hello"
	K           int    `json:"k"`           // episodes per task instance
	Concurrency int    `json:"concurrency"` // episodes at once
	Seeds       string `json:"seeds"`       // CSV file of task instances
	Provider    string `json:"provider"`    // provider of steps that name none
}

// Runner runs tasks for the start button.
type Runner interface {
	// Run runs the task req names as a group until its episodes end or ctx is cancelled,
	// passing each progress event to progress, and tears down what the episodes made before it
	// returns the group's id. A runner that hands the group to workers elsewhere (Temporal)
	// returns its id once they have it, with no progress event: the group then outlives the
	// explorer. It returns an error wrapping agentenv.ErrInvalid for bad input, before any
	// episode starts.
	Run(ctx context.Context, req RunRequest, progress func(task.Event)) (group string, err error)
	// Cancel cancels group, which runs on workers elsewhere (Temporal), and returns once they
	// have torn its episodes down; a group it cannot reach is an error saying where to cancel
	// it (agentenv.ErrConflict for a group run by another process).
	Cancel(ctx context.Context, group string) error
}

// Deployer tears deployments down for the teardown button.
type Deployer interface {
	// Teardown tears down deployment id and returns the verified receipt.
	Teardown(ctx context.Context, id string) (agentenv.Receipt, error)
}

// Collector runs gc for the ledger page; *lifecycle.Manager is one.
type Collector interface {
	// GC collects what nobody owns any more, or only reports it with opts.DryRun.
	GC(ctx context.Context, opts lifecycle.GCOptions) (lifecycle.GCReport, error)
}

// Inventory says what the providers hold, for the ledger and deployment pages.
type Inventory interface {
	// Sandboxes joins the ledger's records that are not gone with what each provider lists.
	Sandboxes(ctx context.Context) ([]Sandbox, error)
	// Health says whether r's sandbox runs: "running", or why not.
	Health(ctx context.Context, r agentenv.Record) string
}

// Sandbox is one row of the ledger page: a record joined with its provider's listing.
type Sandbox struct {
	Record     string         `json:"record"`
	Provider   string         `json:"provider"`
	Kind       agentenv.Kind  `json:"kind,omitempty"`
	State      agentenv.State `json:"state,omitempty"` // the ledger's
	Status     string         `json:"status"`          // what the provider says: live, leaked, missing, unrecorded, ...
	SandboxID  string         `json:"sandbox_id,omitempty"`
	Deployment string         `json:"deployment,omitempty"`
	Run        string         `json:"run,omitempty"`
	Owner      string         `json:"owner,omitempty"`
	Image      string         `json:"image,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// Config is what an Explorer reads and calls. Ledger is required; a nil Runner, Deployer,
// Collector or Inventory turns its buttons or columns off.
type Config struct {
	Ledger    agentenv.Ledger
	Runner    Runner
	Deployer  Deployer
	Collector Collector
	Inventory Inventory
	// RunsDir is the folder of the runs' work folders (the state folder's runs/): trajectory
	// files are read only from below it.
	RunsDir string
	// Hosts are the Host header values a request may carry (host:port); any other gets 421.
	Hosts []string
	// Token, when set, must come with every request: as "Authorization: Bearer TOKEN", or as
	// the cookie that opening a page with ?token=TOKEN sets.
	Token  string
	Logger *slog.Logger // nil discards
	// Context is what runs started from the pages derive from: its cancellation cancels them,
	// and its values reach their teardowns (the CLI's hard stop). Background if nil.
	Context context.Context
}

// Explorer serves the pages and the API. Close it to cancel the runs it started.
type Explorer struct {
	cfg   Config
	log   *slog.Logger
	csrf  string
	pages *pages
	live  *live
	mux   *http.ServeMux

	baseCtx context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// New returns an Explorer over cfg.
func New(cfg Config) (*Explorer, error) {
	if cfg.Ledger == nil {
		return nil, fmt.Errorf("explorer: no ledger: %w", agentenv.ErrInvalid)
	}
	if len(cfg.Hosts) == 0 {
		return nil, fmt.Errorf("explorer: no allowed hosts: %w", agentenv.ErrInvalid)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	csrf, err := randomToken()
	if err != nil {
		return nil, err
	}
	p, err := newPages()
	if err != nil {
		return nil, err
	}
	parent := cfg.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := context.WithCancel(parent)
	x := &Explorer{cfg: cfg, log: log, csrf: csrf, pages: p, baseCtx: ctx, stop: stop}
	x.live = newLive(x)
	x.mux = x.routes()
	return x, nil
}

// Handler returns the explorer's HTTP handler, with its guards in front.
func (x *Explorer) Handler() http.Handler { return x.guard(x.mux) }

// Close cancels the runs the explorer started and waits until they have torn down what they
// made, or until ctx ends.
func (x *Explorer) Close(ctx context.Context) error {
	x.stop()
	if err := cleanup.Wait(ctx, &x.wg); err != nil {
		return fmt.Errorf("explorer: close: runs still tearing down: %w", err)
	}
	return nil
}

// httpError is an error with the status it answers.
type httpError struct {
	code int
	msg  string
}

func (e httpError) Error() string { return e.msg }

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var he httpError
	switch {
	case errors.As(err, &he):
		return he.code
	case errors.Is(err, agentenv.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, agentenv.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, agentenv.ErrConflict):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

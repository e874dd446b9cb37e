// Package temporal runs run groups on Temporal: a group is a workflow, each of its episodes a
// child workflow whose episode is an activity that heartbeats, followed by a teardown activity
// that always runs. Workers ([Work]) on any number of machines share the submitter's PostgreSQL
// ledger; [Remote] is the [eval.Remote] a submitter hands groups to. Only ids travel through
// Temporal (a group's, a slot's, an episode's run id and outcome): files, outputs and
// secrets stay in the ledger and the workers' configuration.
package temporal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/agentenv/agentenv"
)

// Defaults of Config.
const (
	DefaultNamespace = "default"
	DefaultTaskQueue = "agentenv"
	DefaultSlots     = 4
)

// dialTimeout bounds reaching the server and checking the namespace.
const dialTimeout = 10 * time.Second

// Config says which Temporal server, namespace and task queue carry groups, and how many
// episodes a worker runs at once. The keys runner.temporal, runner.namespace, runner.task_queue
// and runner.slots (AGENTENV_RUNNER_*) and the flags of the same names fill it.
type Config struct {
	Address   string // host:port of the server's frontend
	Namespace string // DefaultNamespace if empty
	TaskQueue string // DefaultTaskQueue if empty
	Slots     int    // a worker's episodes at once; DefaultSlots if 0
}

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.TaskQueue == "" {
		c.TaskQueue = DefaultTaskQueue
	}
	if c.Slots <= 0 {
		c.Slots = DefaultSlots
	}
	return c
}

// Dial connects to cfg's server and checks that its namespace exists, within dialTimeout. Its
// errors name the address or namespace and the setting that gave it; one wrapping
// agentenv.ErrInvalid is bad input (no address, an unknown namespace).
func Dial(ctx context.Context, cfg Config, log *slog.Logger) (client.Client, error) {
	cfg = cfg.withDefaults()
	if cfg.Address == "" {
		return nil, fmt.Errorf("temporal: no server address: set --temporal HOST:PORT or runner.temporal (AGENTENV_RUNNER_TEMPORAL): %w", agentenv.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	opts := client.Options{HostPort: cfg.Address, Namespace: cfg.Namespace, Logger: tlog.NewStructuredLogger(log), Identity: identity()}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("temporal server %s (--temporal or runner.temporal) cannot be reached: %w", cfg.Address, err)
	}
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: cfg.Namespace}); err != nil {
		c.Close()
		var nf *serviceerror.NamespaceNotFound
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("temporal server %s has no namespace %q (--namespace or runner.namespace): %w", cfg.Address, cfg.Namespace, agentenv.ErrInvalid)
		}
		return nil, fmt.Errorf("temporal server %s: namespace %q: %w", cfg.Address, cfg.Namespace, err)
	}
	return c, nil
}

// identity names this process in Temporal's history: host and pid, like a ledger owner.
func identity() string {
	h, _ := os.Hostname()
	return h + ":" + strconv.Itoa(os.Getpid())
}

// CheckLedger refuses a ledger that workers on other machines cannot share: anything but
// PostgreSQL. dsn is the ledger.dsn setting.
func CheckLedger(dsn string) error {
	scheme, _, _ := strings.Cut(dsn, "://")
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return nil
	}
	return fmt.Errorf("the temporal runner needs a PostgreSQL ledger (ledger.dsn postgres://…, AGENTENV_LEDGER_DSN) that every worker and submitter shares; a file ledger is this machine's alone, and workers elsewhere would write records no gc here can see: %w", agentenv.ErrInvalid)
}

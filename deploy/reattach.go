package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentenv/agentenv"
)

// Reattach rebuilds a live view of deployment id from the ledger, checking each sandbox with its
// provider (lifecycle.Manager.Get). As the seeds define it: a dead MCP server or gateway is an error; a dead
// service DB is skipped with a warning, except in a multi env (several servers share it), where
// it is an error. The token is not in the ledger, so the Result has none. Reattach never tears
// anything down.
func (d *Deployer) Reattach(ctx context.Context, id string) (*Result, []string, error) {
	doc, err := d.mgr.Ledger().Deployments().Get(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("reattach %s: %w", id, err)
	}
	recs, err := d.mgr.Ledger().List(ctx, agentenv.Filter{Deployment: id})
	if err != nil {
		return nil, nil, fmt.Errorf("reattach %s: %w", id, err)
	}
	res, warnings, err := reattach(doc, recs, func(id string) error { _, err := d.mgr.Get(ctx, id); return err })
	if err != nil {
		return nil, warnings, err
	}
	for _, w := range warnings {
		d.log.Warn(w, "deployment", id)
	}
	return res, warnings, nil
}

// reattach is Reattach's verdict on deployment doc with records recs, down(id) saying why the
// sandbox of record id does not run (nil if it runs).
func reattach(doc agentenv.Deployment, recs []agentenv.Record, down func(id string) error) (*Result, []string, error) {
	if doc.State != agentenv.DeploymentLive {
		return nil, nil, fmt.Errorf("reattach %s: deployment is %s: %w", doc.ID, doc.State, agentenv.ErrGone)
	}
	res := &Result{Doc: doc, GatewayURL: doc.GatewayURL, Endpoints: map[string]string{}}
	var warnings []string
	var errs []error
	multi := len(doc.Servers) > 1
	for _, r := range recs {
		if r.Kind == agentenv.KindNetwork || r.State == agentenv.StateGone {
			continue
		}
		res.Records = append(res.Records, r.ID)
		err := down(r.ID)
		if err == nil {
			for k, v := range r.Attrs {
				if strings.HasPrefix(k, "endpoint.") {
					res.Endpoints[componentOf(r)] = v
				}
			}
			continue
		}
		switch {
		case r.Role == agentenv.RoleServiceDB && !multi:
			warnings = append(warnings, fmt.Sprintf("service DB %s is down (%v); reattached without it", r.ID, err))
		case r.Role == agentenv.RoleDBWeb:
			warnings = append(warnings, fmt.Sprintf("DB web UI %s is down (%v)", r.ID, err))
		case r.Role == agentenv.RoleServiceDB:
			errs = append(errs, fmt.Errorf("service DB %s of a multi env is down: %w", r.ID, err))
		default:
			errs = append(errs, fmt.Errorf("%s %s is down: %w", r.Role, r.ID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, warnings, fmt.Errorf("reattach %s: %w", doc.ID, err)
	}
	return res, warnings, nil
}

// componentOf returns the name of the component record r of a deployment was made for: for a
// container in a caller's VM, its name there without the deployment's SHORTID- before it;
// otherwise see component.
func componentOf(r agentenv.Record) string {
	if r.Kind == agentenv.KindInVM {
		name := r.Attrs[agentenv.AttrInVMName]
		if _, after, ok := strings.Cut(name, "-"); ok {
			return after
		}
		return name
	}
	return component(r.ID)
}

// component returns the name of the component a record of a deployment was made for: its id
// is the name, a dash and a random suffix (lifecycle.NewID).
func component(record string) string {
	if i := strings.LastIndexByte(record, '-'); i > 0 {
		return record[:i]
	}
	return record
}

// Inspection is what Inspect says of a deployment: its document, each of its records with
// whether its sandbox runs, and, for a live deployment, whether Reattach can use it.
type Inspection struct {
	Deployment agentenv.Deployment `json:"deployment"`
	Sandboxes  []SandboxHealth     `json:"sandboxes"`
	Reattach   *ReattachCheck      `json:"reattach"` // nil unless the deployment is live
}

// SandboxHealth is one record of a deployment and what its provider says of its sandbox:
// "running", "down: WHY", or "-" for a record that is gone.
type SandboxHealth struct {
	Record string         `json:"record"`
	Role   agentenv.Role  `json:"role"`
	State  agentenv.State `json:"state"`
	Health string         `json:"health"`
}

// ReattachCheck is the verdict of Reattach on a live deployment: usable or not, and why.
type ReattachCheck struct {
	OK       bool     `json:"ok"`
	Error    string   `json:"error,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// Inspect reads deployment id and asks each of its records' providers whether its sandbox
// runs; a live deployment is also checked by Reattach, as the seeds define it (a dead server or
// gateway makes it unusable; a dead service DB of a one-server env is a warning). It changes
// nothing.
func (d *Deployer) Inspect(ctx context.Context, id string) (Inspection, error) {
	doc, err := d.mgr.Ledger().Deployments().Get(ctx, id)
	if err != nil {
		return Inspection{}, err
	}
	recs, err := d.mgr.Ledger().List(ctx, agentenv.Filter{Deployment: doc.ID})
	if err != nil {
		return Inspection{}, err
	}
	in := Inspection{Deployment: doc}
	downs := map[string]error{} // each sandbox asked once, for its health and the reattach verdict
	for _, r := range recs {
		h := "-"
		if r.State != agentenv.StateGone {
			_, downs[r.ID] = d.mgr.Get(ctx, r.ID)
			h = health(downs[r.ID])
		}
		in.Sandboxes = append(in.Sandboxes, SandboxHealth{r.ID, r.Role, r.State, h})
	}
	if doc.State == agentenv.DeploymentLive {
		_, warnings, err := reattach(doc, recs, func(id string) error { return downs[id] })
		in.Reattach = &ReattachCheck{OK: err == nil, Warnings: warnings}
		if err != nil {
			in.Reattach.Error = err.Error()
		}
	}
	return in, nil
}

// Health asks the provider of record id whether its sandbox runs: "running", or "down: WHY".
func (d *Deployer) Health(ctx context.Context, id string) string {
	_, err := d.mgr.Get(ctx, id)
	return health(err)
}

// health is "running", or "down: WHY" for the error of a provider's Get.
func health(err error) string {
	if err != nil {
		return "down: " + err.Error()
	}
	return "running"
}

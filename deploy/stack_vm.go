package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
)

// upVM runs VM mode: one VM record (or the caller's VM, with --into), then the stack inside it.
func (st *stack) upVM(ctx context.Context) error {
	comps, err := st.components(ctx)
	if err != nil {
		return err
	}
	st.warnEgress(true)
	st.warnBrowser("in vm mode the stack shares its VM's network")
	if st.opts.Into != "" {
		rec, err := st.d.mgr.Ledger().Get(ctx, st.opts.Into)
		if err != nil {
			return fmt.Errorf("--into %s: %w", st.opts.Into, err)
		}
		if rec.Kind != agentenv.KindVM || rec.State != agentenv.StateLive || rec.Provider != st.member {
			return fmt.Errorf("--into %s: want a live %s VM, have a %s %s on %s: %w", st.opts.Into, st.member, rec.State, rec.Kind, rec.Provider, agentenv.ErrInvalid)
		}
		st.vm = rec.ID
		for _, c := range comps {
			st.doc.InVM = append(st.doc.InVM, st.inVMName(c.Name))
		}
		// Written before anything starts, for a reader of the document; the claim of each
		// name is its in_vm record, written by AddToVM.
		if err := st.d.mgr.Ledger().Deployments().Put(ctx, st.doc); err != nil {
			return fmt.Errorf("--into %s: record deployment: %w", st.vm, err)
		}
	} else {
		vrec, vsb, err := st.d.mgr.Create(ctx, st.request(agentenv.KindVM, agentenv.RoleVM, agentenv.SandboxSpec{}, "vm"))
		if err != nil {
			return fmt.Errorf("vm: %w", err)
		}
		st.vm = vrec.ID
		st.emit(spec.Component{Name: "vm", Role: agentenv.RoleVM}, "created", vsb.ID)
		for _, c := range comps {
			st.doc.InVM = append(st.doc.InVM, c.Name)
		}
	}
	if st.store != nil {
		if err := st.upStore(ctx); err != nil {
			return err
		}
	}
	return st.inOrder(ctx, comps, func(ctx context.Context, c spec.Component, sp agentenv.SandboxSpec) (string, agentenv.Sandbox, error) {
		sp.Labels = map[string]string{agentenv.LabelRole: string(c.Role)}
		sp.Name = c.Name
		if st.opts.Into == "" {
			sb, err := st.d.mgr.RunInVM(ctx, st.vm, sp)
			return "", sb, err
		}
		// In a caller's VM, beside other deployments: a name of this deployment's own, on a
		// network of its own where the others reach it by its plain name.
		sp.Name, sp.Network, sp.Aliases = st.inVMName(c.Name), st.inVMNetwork(), []string{c.Name}
		_, sb, err := st.d.mgr.AddToVM(ctx, st.vm, st.request(agentenv.KindInVM, c.Role, sp, ""))
		if errors.Is(err, agentenv.ErrConflict) {
			err = fmt.Errorf("--into %s: %w; tear that deployment down first", st.vm, err)
		}
		return "", sb, err
	})
}

// inVMName is the name in the VM's stack of this deployment's component name: the name itself
// in a VM of its own, and with the deployment's short id before it in a caller's VM, so that
// two deployments there never take each other's names.
func (st *stack) inVMName(name string) string {
	if st.opts.Into == "" {
		return name
	}
	return st.short() + "-" + name
}

// inVMNetwork is the network in a caller's VM that this deployment's components join.
func (st *stack) inVMNetwork() string { return "agentenv-" + st.short() }

// short is the deployment's id without its "dep-" prefix, cut to 12 characters.
func (st *stack) short() string {
	id := strings.TrimPrefix(st.doc.ID, "dep-")
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}

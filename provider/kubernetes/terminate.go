package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/ctxerr"
)

// removalWait bounds how long Terminate waits, past the grace period, for a deleted Pod to be
// gone before it counts it as being removed.
const removalWait = 10 * time.Second

// Terminate removes everything labelled agentenv.record=id: the Pod (with the configured grace
// period; none for a Pod that has completed), its Services, and for a network its NetworkPolicies,
// ServiceAccount and Namespace. An object that is already gone or being deleted counts as
// removed; Terminate of an unknown id is nil. It waits, bounded, for the Pod to be gone.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if err := checkName(id); err != nil {
		return fmt.Errorf("kubernetes: terminate: %w", err)
	}
	if err := p.terminate(ctx, id); err != nil {
		return fmt.Errorf("kubernetes: terminate %s: %w", id, p.kind(err))
	}
	p.log.Debug("terminated", "record_id", id)
	return nil
}

// objects is what carries one selector, across namespaces.
type objects struct {
	pods       []corev1.Pod
	services   []corev1.Service
	secrets    []corev1.Secret
	namespaces []corev1.Namespace
}

// listObjects lists the Pods, Services, Secrets and Namespaces matching sel, concurrently.
func (p *Provider) listObjects(ctx context.Context, api API, sel string) (objects, error) {
	var (
		wg   sync.WaitGroup
		o    objects
		errs [4]error
	)
	opts := metav1.ListOptions{LabelSelector: sel}
	wg.Go(func() {
		l, err := api.Pods(metav1.NamespaceAll).List(ctx, opts)
		if err == nil {
			o.pods = l.Items
		}
		errs[0] = err
	})
	wg.Go(func() {
		l, err := api.Services(metav1.NamespaceAll).List(ctx, opts)
		if err == nil {
			o.services = l.Items
		}
		errs[1] = err
	})
	wg.Go(func() {
		l, err := api.Namespaces().List(ctx, opts)
		if err == nil {
			o.namespaces = l.Items
		}
		errs[2] = err
	})
	wg.Go(func() {
		l, err := api.Secrets(metav1.NamespaceAll).List(ctx, opts)
		if err == nil {
			o.secrets = l.Items
		}
		errs[3] = err
	})
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return objects{}, ctxerr.Prefer(ctx, err)
	}
	return o, nil
}

func (p *Provider) terminate(ctx context.Context, id string) error {
	api, err := p.client(ctx)
	if err != nil {
		return err
	}
	sel, err := selector(map[string]string{agentenv.LabelRecord: id})
	if err != nil {
		return err
	}
	o, err := p.listObjects(ctx, api, sel)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	grace := int64(p.cfg.StopGrace.Round(time.Second) / time.Second)
	for _, pod := range o.pods {
		p.closeForwards(pod.Namespace, pod.Name)
		if pod.DeletionTimestamp != nil {
			continue
		}
		wg.Go(func() {
			g := grace
			if st, _ := state(&pod); st == agentenv.SandboxExited {
				g = 0
			}
			err := api.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &g})
			if err != nil && !apierrors.IsNotFound(err) {
				fail(fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, ctxerr.Prefer(ctx, err)))
			}
		})
	}
	for _, svc := range o.services {
		wg.Go(func() {
			err := api.Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				fail(fmt.Errorf("delete service %s/%s: %w", svc.Namespace, svc.Name, ctxerr.Prefer(ctx, err)))
			}
		})
	}
	for _, sec := range o.secrets {
		wg.Go(func() {
			err := api.Secrets(sec.Namespace).Delete(ctx, sec.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				fail(fmt.Errorf("delete secret %s/%s: %w", sec.Namespace, sec.Name, ctxerr.Prefer(ctx, err)))
			}
		})
	}
	for _, ns := range o.namespaces {
		if ns.DeletionTimestamp != nil {
			continue
		}
		wg.Go(func() {
			if err := p.deleteNetwork(ctx, api, ns.Name, sel); err != nil {
				fail(fmt.Errorf("delete network %s: %w", ns.Name, err))
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	p.waitRemoved(ctx, api, o.pods)
	return nil
}

// deleteNetwork deletes the policies and service account of a deployment's namespace, then the
// namespace itself. The namespace's deletion removes whatever else is in it on a cluster that
// runs the namespace controller; the explicit deletes make the policies go on one that does not.
func (p *Provider) deleteNetwork(ctx context.Context, api API, ns, sel string) error {
	nps, err := api.NetworkPolicies(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("list policies: %w", ctxerr.Prefer(ctx, err))
	}
	if err == nil {
		for _, np := range nps.Items {
			if err := api.NetworkPolicies(ns).Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete policy %s: %w", np.Name, ctxerr.Prefer(ctx, err))
			}
		}
	}
	if err := api.ServiceAccounts(ns).Delete(ctx, ServiceAccountName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete service account: %w", ctxerr.Prefer(ctx, err))
	}
	bg := metav1.DeletePropagationBackground
	if err := api.Namespaces().Delete(ctx, ns, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		return ctxerr.Prefer(ctx, err)
	}
	return nil
}

// waitRemoved waits until pods are gone, for at most the grace period and removalWait (and no
// longer than ctx). Their deletion has been accepted, so pods still there after that (or whose
// state cannot be read) count as removed: the kubelet finishes the job, and List no longer
// reports them.
func (p *Provider) waitRemoved(ctx context.Context, api API, pods []corev1.Pod) {
	if len(pods) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, p.cfg.StopGrace+removalWait)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	left := pods
	for len(left) > 0 {
		var still []corev1.Pod
		for _, pod := range left {
			got, err := api.Pods(pod.Namespace).Get(wctx, pod.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				p.log.Debug("wait for pod removal", "pod", pod.Namespace+"/"+pod.Name, "err", err)
				still = append(still, pod)
			case got.UID != pod.UID:
				// A new Pod of the same name is not this one.
			default:
				still = append(still, pod)
			}
		}
		left = still
		if len(left) == 0 {
			return
		}
		select {
		case <-wctx.Done():
			p.log.Debug("pods still being deleted", "count", len(left), "first", left[0].Name)
			return
		case <-t.C:
		}
	}
}

// Get returns the running Pod of record id, with its endpoints. It returns an error wrapping
// ErrGone if the Pod has finished or is being deleted, and ErrNotFound if there is none. A
// network's id returns its Namespace, running. A Pod not yet running is returned with State
// creating.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	if err := checkName(id); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: get: %w", err)
	}
	api, err := p.client(ctx)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	sel, err := selector(map[string]string{agentenv.LabelRecord: id})
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: get %s: %w", id, err)
	}
	o, err := p.listObjects(ctx, api, sel)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: get %s: %w", id, p.kind(err))
	}
	if len(o.pods) > 0 {
		pod := o.pods[0] // the record label is the Pod's name: there is at most one
		if pod.DeletionTimestamp != nil {
			return agentenv.Sandbox{}, fmt.Errorf("kubernetes: get %s: pod is being deleted: %w", id, agentenv.ErrGone)
		}
		sb := p.sandbox(&pod)
		switch sb.State {
		case agentenv.SandboxExited:
			return agentenv.Sandbox{}, fmt.Errorf("kubernetes: get %s: pod %s with exit code %d: %w", id, pod.Status.Phase, sb.ExitCode, agentenv.ErrGone)
		case agentenv.SandboxRunning:
			if sb.Endpoints, err = p.endpoints(ctx, api, &pod, o.services); err != nil {
				return agentenv.Sandbox{}, fmt.Errorf("kubernetes: get %s: %w", id, err)
			}
		}
		return sb, nil
	}
	for _, ns := range o.namespaces {
		if ns.DeletionTimestamp == nil {
			return p.networkSandbox(&ns), nil
		}
	}
	return agentenv.Sandbox{}, fmt.Errorf("kubernetes: get %s: %w", id, agentenv.ErrNotFound)
}

// List returns the sandboxes and networks carrying every one of labels, across namespaces.
// Objects being deleted are left out. Services whose Pod is gone are reported as an exited
// sandbox of their record, so that a teardown still removes them.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	api, err := p.client(ctx)
	if err != nil {
		return nil, err
	}
	sel, err := selector(labels)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list: %w", err)
	}
	o, err := p.listObjects(ctx, api, sel)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list: %w", p.kind(err))
	}
	// The exact labels are matched again: that rules out the (unlikely) digest collisions of
	// the label-safe form the selector uses.
	var out []agentenv.Sandbox
	seen := map[string]bool{}
	for _, pod := range o.pods {
		sb := p.sandbox(&pod)
		if pod.DeletionTimestamp != nil || !agentenv.MatchLabels(sb.Labels, labels) {
			continue
		}
		seen[sb.ID] = true
		if sb.State == agentenv.SandboxRunning {
			if sb.Endpoints, err = p.endpoints(ctx, api, &pod, o.services); err != nil {
				return nil, fmt.Errorf("kubernetes: list: %w", err)
			}
		}
		out = append(out, sb)
	}
	for _, ns := range o.namespaces {
		sb := p.networkSandbox(&ns)
		if ns.DeletionTimestamp != nil || !agentenv.MatchLabels(sb.Labels, labels) || seen[sb.ID] {
			continue
		}
		seen[sb.ID] = true
		out = append(out, sb)
	}
	for _, svc := range o.services {
		l := readLabels(svc.Labels, svc.Annotations)
		id := l[agentenv.LabelRecord]
		if svc.DeletionTimestamp != nil || !agentenv.MatchLabels(l, labels) || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, agentenv.Sandbox{
			ID: id, Name: id, Provider: p.cfg.Name, State: agentenv.SandboxExited, Labels: l,
			Created: svc.CreationTimestamp.Time,
		})
	}
	return out, nil
}

// sandbox makes the Sandbox of a Pod, without endpoints.
func (p *Provider) sandbox(pod *corev1.Pod) agentenv.Sandbox {
	st, code := state(pod)
	return agentenv.Sandbox{
		ID: pod.Name, Name: pod.Name, Provider: p.cfg.Name, State: st, ExitCode: code,
		Labels: readLabels(pod.Labels, pod.Annotations), Created: pod.CreationTimestamp.Time,
	}
}

// networkSandbox makes the Sandbox of a deployment's Namespace.
func (p *Provider) networkSandbox(ns *corev1.Namespace) agentenv.Sandbox {
	return agentenv.Sandbox{
		ID: ns.Name, Name: ns.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: readLabels(ns.Labels, ns.Annotations), Endpoints: map[string]string{},
		Created: ns.CreationTimestamp.Time,
	}
}

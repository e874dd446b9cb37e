package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/ctxerr"
)

// Bounds of the steps that run on a detached context, so that a cancelled caller never leaves an
// object whose existence we do not know.
const (
	createBound  = 30 * time.Second // one create request
	cleanupBound = 30 * time.Second // removing what a failed Create made
)

// Create makes the Pod of record spec.Name (and its Services) and returns once the Pod runs,
// with its ports reachable at Endpoints. A Pod that finishes before it is seen running is
// reported in the returned Sandbox (State exited, ExitCode) rather than as an error.
//
// The Pod is created on a detached, bounded context, so Create always knows whether it exists;
// if ctx ends or any later step fails, Create deletes everything labelled with the record before
// returning. A Pod whose image cannot be pulled is ErrInvalid; with spec.Pinned, the Pod runs the
// pinned image (logging in with spec.PullAuth, through an image pull Secret of the record), and
// when the node cannot pull it the Pod is patched to spec.Image, Sandbox.ImageNote saying so. A
// spec whose agentenv.record label
// is not spec.Name, or whose name is not a DNS label, is ErrInvalid. A Pod of the same name that
// already exists is ErrConflict and is left alone. At most Config.Concurrency creates run at
// once; the others wait for a slot (or for ctx).
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (sb agentenv.Sandbox, err error) {
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: label %s=%q, want the record id: %w",
			spec.Name, agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	if err := checkName(spec.Name); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create: %w", err)
	}
	ns := p.cfg.Namespace
	if spec.Network != "" {
		if err := checkName(spec.Network); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: network: %w", spec.Name, err)
		}
		ns = spec.Network
	} else if len(spec.Aliases) > 0 {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: aliases without a network: %w", spec.Name, agentenv.ErrInvalid)
	}
	pod, err := p.podFor(ns, spec, time.Now())
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: %w", spec.Name, err)
	}
	if _, err := p.servicesFor(pod, spec); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: %w", spec.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: %w", spec.Name, err)
	}
	api, err := p.client(ctx)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	if err := p.acquire(ctx); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: %w", spec.Name, err)
	}
	defer p.release()
	if spec.Network == "" {
		if err := p.ensureNamespace(ctx, api); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: %w", spec.Name, err)
		}
	}
	log := p.log.With("record_id", spec.Name, "namespace", ns, "op", "create")

	made := false // whether an object may exist that this call must remove on error
	defer func() {
		if err == nil || !made {
			return
		}
		cctx, cancel := cleanup.Context(ctx, cleanupBound)
		defer cancel()
		if cerr := p.terminate(cctx, spec.Name); cerr != nil {
			log.Warn("remove after failed create", "err", cerr)
			err = errors.Join(err, fmt.Errorf("kubernetes: remove %s after failed create: %w", spec.Name, cerr))
		}
	}()

	events, unsubscribe, err := p.subscribe(ctx, api, ns, spec.Name)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: watch pods: %w", spec.Name, err)
	}
	defer unsubscribe()
	for _, secret := range []*corev1.Secret{secretFor(pod, spec.Env), pullSecretFor(pod, spec)} {
		if secret == nil {
			continue
		}
		// Made before the Pod, which reads them as it starts; labelled with the record, so the
		// cleanup above removes them if the Pod is never made.
		cctx, cancel := cleanup.Detached(ctx, createBound)
		_, err := api.Secrets(ns).Create(cctx, secret, metav1.CreateOptions{})
		cancel()
		if err != nil {
			made = made || (!apierrors.IsAlreadyExists(err) && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) &&
				!apierrors.IsNotFound(err) && !apierrors.IsBadRequest(err))
			switch {
			case apierrors.IsNotFound(err) && spec.Network != "":
				err = fmt.Errorf("network %q: %w: %w", spec.Network, agentenv.ErrInvalid, err)
			case apierrors.IsAlreadyExists(err):
				err = fmt.Errorf("secret %s/%s exists: %w: %w", ns, secret.Name, agentenv.ErrConflict, err)
			}
			return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: secret: %w", spec.Name, p.kind(err))
		}
		made = true
	}
	cctx, cancel := cleanup.Detached(ctx, createBound)
	created, err := api.Pods(ns).Create(cctx, pod, metav1.CreateOptions{})
	cancel()
	if err != nil {
		made = made || (!apierrors.IsAlreadyExists(err) && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) &&
			!apierrors.IsNotFound(err) && !apierrors.IsBadRequest(err))
		switch {
		case apierrors.IsNotFound(err) && spec.Network != "":
			err = fmt.Errorf("network %q: %w: %w", spec.Network, agentenv.ErrInvalid, err)
		case apierrors.IsAlreadyExists(err):
			err = fmt.Errorf("pod %s/%s exists: %w: %w", ns, spec.Name, agentenv.ErrConflict, err)
		}
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: %w", spec.Name, p.kind(err))
	}
	made = true
	log.Debug("pod accepted", "uid", created.UID)
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: %w", spec.Name, err)
	}
	svcs, _ := p.servicesFor(created, spec)
	var madeSvcs []corev1.Service
	for _, svc := range svcs {
		got, err := api.Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			if apierrors.IsAlreadyExists(err) {
				err = fmt.Errorf("alias %s taken in %s: %w: %w", svc.Name, ns, agentenv.ErrConflict, err)
			}
			return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: service %s: %w", spec.Name, svc.Name, p.kind(ctxerr.Prefer(ctx, err)))
		}
		madeSvcs = append(madeSvcs, *got)
	}
	running, err := p.waitStarted(ctx, api, created, events)
	note := ""
	if spec.Pinned != "" {
		note = "pulled " + spec.Pinned
		if pe := (*pullError)(nil); errors.As(err, &pe) && spec.Image != spec.Pinned {
			note = fmt.Sprintf("pull of %s failed (%s); running %s", spec.Pinned, pe.why, spec.Image)
			log.Info("pinned image not pulled; running the image as named", "pinned", spec.Pinned, "image", spec.Image, "why", pe.why)
			running, err = p.runImage(ctx, api, created, spec.Image, events)
			if err != nil {
				err = fmt.Errorf("%s: %w", note, err)
			}
		}
	}
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: %w", spec.Name, err)
	}
	sb = p.sandbox(running)
	sb.ImageNote = note
	if sb.State == agentenv.SandboxRunning {
		if sb.Endpoints, err = p.endpoints(ctx, api, running, madeSvcs); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create %s: %w", spec.Name, err)
		}
	}
	log.Debug("sandbox created", "state", sb.State, "endpoints", sb.Endpoints)
	return sb, nil
}

// runImage patches pod's container to image, on a detached, bounded context, and waits for it
// to start as waitStarted does.
func (p *Provider) runImage(ctx context.Context, api API, pod *corev1.Pod, image string, events <-chan *corev1.Pod) (*corev1.Pod, error) {
	patch, err := json.Marshal([]map[string]string{{"op": "replace", "path": "/spec/containers/0/image", "value": image}})
	if err != nil {
		return nil, err
	}
	cctx, cancel := cleanup.Detached(ctx, createBound)
	patched, err := api.Pods(pod.Namespace).Patch(cctx, pod.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("patch the pod to %s: %w", image, p.kind(ctxerr.Prefer(ctx, err)))
	}
	return p.waitStarted(ctx, api, patched, events)
}

// CreateNetwork makes the Namespace of a deployment, named spec.Name and carrying spec.Labels
// (which must include agentenv.record=spec.Name), with the ServiceAccount its Pods run as and its
// NetworkPolicies. Its Sandbox.ID is spec.Name: sandboxes join it by setting SandboxSpec.Network
// to it, and Terminate(spec.Name) removes it and everything in it. A namespace of that name that
// already exists is ErrConflict and is left alone.
func (p *Provider) CreateNetwork(ctx context.Context, spec agentenv.NetworkSpec) (sb agentenv.Sandbox, err error) {
	if err := checkName(spec.Name); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create network: %w", err)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create network %s: label %s=%q, want the record id: %w",
			spec.Name, agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	lbl, ann, err := objectLabels(specLabels(spec.Labels, time.Now().Add(p.cfg.DefaultTimeout)))
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create network %s: %w", spec.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create network %s: %w", spec.Name, err)
	}
	api, err := p.client(ctx)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	made := false
	defer func() {
		if err == nil || !made {
			return
		}
		cctx, cancel := cleanup.Context(ctx, cleanupBound)
		defer cancel()
		if cerr := p.terminate(cctx, spec.Name); cerr != nil {
			p.log.Warn("remove after failed create", "record_id", spec.Name, "err", cerr)
			err = errors.Join(err, fmt.Errorf("kubernetes: remove network %s after failed create: %w", spec.Name, cerr))
		}
	}()
	cctx, cancel := cleanup.Detached(ctx, createBound)
	nsObj, err := api.Namespaces().Create(cctx, namespaceFor(spec, lbl, ann), metav1.CreateOptions{})
	cancel()
	if err != nil {
		made = !apierrors.IsAlreadyExists(err) && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err)
		if apierrors.IsAlreadyExists(err) {
			err = fmt.Errorf("namespace %s exists: %w: %w", spec.Name, agentenv.ErrConflict, err)
		}
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create network %s: %w", spec.Name, p.kind(err))
	}
	made = true
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create network %s: %w", spec.Name, err)
	}
	if _, err := api.ServiceAccounts(spec.Name).Create(ctx, serviceAccountFor(spec.Name, lbl, ann), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create network %s: service account: %w", spec.Name, p.kind(ctxerr.Prefer(ctx, err)))
	}
	for _, np := range policiesFor(spec.Name, lbl, ann, spec.Egress) {
		if _, err := api.NetworkPolicies(spec.Name).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create network %s: policy %s: %w", spec.Name, np.Name, p.kind(ctxerr.Prefer(ctx, err)))
		}
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("kubernetes: create network %s: %w", spec.Name, err)
	}
	p.log.Debug("network created", "record_id", spec.Name)
	return p.networkSandbox(nsObj), nil
}

// ensureNamespace makes Config.Namespace and its ServiceAccount once per process, for the
// sandboxes that join no network. Either may exist already.
func (p *Provider) ensureNamespace(ctx context.Context, api API) error {
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	if p.nsReady {
		return nil
	}
	ns := p.cfg.Namespace
	// Not labelled with a record: it is shared and never terminated by agentenv.
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "agentenv"}}}
	if _, err := api.Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ns, p.kind(ctxerr.Prefer(ctx, err)))
	}
	if _, err := api.ServiceAccounts(ns).Create(ctx, serviceAccountFor(ns, nil, nil), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: service account: %w", ns, p.kind(ctxerr.Prefer(ctx, err)))
	}
	p.nsReady = true
	return nil
}

package kubernetes

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/ctxerr"
)

// recheckEvery is how often a Create waiting for its Pod reads it directly, in case the shared
// watch missed an event while it was being re-established.
const recheckEvery = 2 * time.Second

// watchPeriod is how long one request of the shared Pod watch lasts before it is re-opened (or
// left closed, when no Create waits).
const watchPeriod = time.Minute

// podWatch is one watch of every agentenv Pod, across namespaces, shared by the Creates of a
// process waiting for their Pods to start: a watch per Create would cost the API server a watch
// per Pod in flight, each seeing every other's events.
type podWatch struct {
	mu      sync.Mutex
	running bool
	waiters map[string]chan *corev1.Pod // by namespace/name; holds the latest state, buffered 1
}

// subscribe registers a waiter for Pod ns/name, starting the shared watch if it is not running;
// it returns once the watch is established, so every later event of the Pod reaches the waiter.
func (p *Provider) subscribe(ctx context.Context, api API, ns, name string) (<-chan *corev1.Pod, func(), error) {
	pw := &p.watch
	key := ns + "/" + name
	ch := make(chan *corev1.Pod, 1)
	unsubscribe := func() {
		pw.mu.Lock()
		if pw.waiters[key] == ch {
			delete(pw.waiters, key)
		}
		pw.mu.Unlock()
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.waiters == nil {
		pw.waiters = map[string]chan *corev1.Pod{}
	}
	pw.waiters[key] = ch
	if pw.running {
		return ch, unsubscribe, nil
	}
	w, err := p.openWatch(ctx, api)
	if err != nil {
		delete(pw.waiters, key)
		return nil, nil, err
	}
	pw.running = true
	go p.runWatch(api, w)
	return ch, unsubscribe, nil
}

func (p *Provider) openWatch(ctx context.Context, api API) (watch.Interface, error) {
	sel, err := selector(nil)
	if err != nil {
		return nil, err
	}
	// The watch outlives the Create that opened it: it lives on the provider's context (ended
	// by Close) and is re-opened every watchPeriod while anyone waits. Opening it is bounded by
	// ConnectTimeout and by ctx.
	wctx, cancel := context.WithCancel(p.root)
	stop := context.AfterFunc(ctx, cancel)
	timer := time.AfterFunc(p.cfg.ConnectTimeout, cancel)
	timeout := int64(watchPeriod / time.Second)
	w, err := api.Pods(metav1.NamespaceAll).Watch(wctx, metav1.ListOptions{LabelSelector: sel, TimeoutSeconds: &timeout})
	timerStopped, ctxStopped := timer.Stop(), stop()
	opened := timerStopped && ctxStopped
	switch {
	case err != nil:
		cancel()
		return nil, p.kind(ctxerr.Prefer(ctx, err))
	case !opened:
		w.Stop()
		cancel()
		return nil, fmt.Errorf("open pod watch: %w", ctxerr.Prefer(ctx, context.DeadlineExceeded))
	}
	return cancelWatch{w, cancel}, nil
}

// cancelWatch is a watch whose Stop also ends the context it was opened on.
type cancelWatch struct {
	watch.Interface
	cancel context.CancelFunc
}

// Stop stops the watch and releases its context.
func (w cancelWatch) Stop() {
	w.Interface.Stop()
	w.cancel()
}

// runWatch delivers events to waiters and re-opens the watch when it ends, until no waiter is
// left (the next subscribe starts it again).
func (p *Provider) runWatch(api API, w watch.Interface) {
	pw := &p.watch
	for {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				pod = pod.DeepCopy()
				now := metav1.Now()
				pod.DeletionTimestamp = &now
			}
			pw.mu.Lock()
			ch := pw.waiters[pod.Namespace+"/"+pod.Name]
			pw.mu.Unlock()
			if ch != nil {
				select { // keep only the latest state
				case <-ch:
				default:
				}
				ch <- pod
			}
		}
		w.Stop()
		pw.mu.Lock()
		if len(pw.waiters) == 0 || p.root.Err() != nil {
			pw.running = false
			pw.mu.Unlock()
			return
		}
		pw.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ConnectTimeout)
		nw, err := p.openWatch(ctx, api)
		cancel()
		if err != nil {
			// Waiters fall back to reading their Pods every recheckEvery; try again after that.
			p.log.Debug("re-open pod watch", "err", err)
			select {
			case <-p.root.Done():
			case <-time.After(recheckEvery):
			}
			nw = watch.NewEmptyWatch()
		}
		w = nw
	}
}

// waitStarted waits until pod runs or finishes, fails for good, ctx ends or StartTimeout passes:
// on the shared watch, with a direct read every recheckEvery in case the watch missed an event.
func (p *Provider) waitStarted(ctx context.Context, api API, pod *corev1.Pod, events <-chan *corev1.Pod) (*corev1.Pod, error) {
	deadline := time.NewTimer(p.cfg.StartTimeout)
	defer deadline.Stop()
	t := time.NewTicker(recheckEvery)
	defer t.Stop()
	for {
		if pod.DeletionTimestamp != nil {
			return nil, fmt.Errorf("pod deleted while starting: %w", agentenv.ErrGone)
		}
		if st, _ := state(pod); st != agentenv.SandboxCreating {
			return pod, nil
		}
		if why, pull := waitingProblem(pod); why != "" {
			err := fmt.Errorf("image %s: %s: %w", pod.Spec.Containers[0].Image, why, agentenv.ErrInvalid)
			if pull {
				err = &pullError{why: why, err: err}
			}
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, fmt.Errorf("pod %s/%s not running within %v (phase %s): %w",
				pod.Namespace, pod.Name, p.cfg.StartTimeout, pod.Status.Phase, agentenv.ErrUnavailable)
		case np := <-events:
			if np.UID == pod.UID {
				pod = np
			}
		case <-t.C:
			fresh, err := api.Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return nil, fmt.Errorf("pod deleted while starting: %w", agentenv.ErrGone)
			case err != nil:
				p.log.Debug("read starting pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			case fresh.UID == pod.UID:
				pod = fresh
			}
		}
	}
}

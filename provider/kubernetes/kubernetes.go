// Package kubernetes is the agentenv provider for a Kubernetes cluster, spoken to through
// client-go's REST client, typed for the two API groups it uses (see API). It supports
// container mode only.
//
// # Layout: one namespace per deployment
//
// A network record (Networker.CreateNetwork) is a Namespace named by the record id. It holds a
// ServiceAccount for the sandboxes (no token mounted) and the NetworkPolicies of the deployment:
// all ingress denied, except the gateway from anywhere, MCP servers from the gateway only, and
// the service DB from the servers and the DB sidecars (db-mcp, the DB web UI) only. Egress is
// not restricted. The namespace is the deployment's root object: deleting it removes everything
// the deployment made. A namespace per deployment (rather than one shared namespace) is what
// lets every component be reached under its plain component name (a Service named after each
// alias), as in Docker's container mode, without two deployments' names clashing.
//
// A sandbox record is a Pod named by the record id, in its network's namespace (or in
// Config.Namespace when it joins no network), with restartPolicy Never, activeDeadlineSeconds
// from SandboxSpec.Timeout (else from Expires) as the backend's own lifetime backstop, no
// privilege escalation and every capability dropped but SandboxSpec.CapAdd. Each alias gets a
// Service of that name selecting the Pod (a sandbox with ports and no alias gets one named by
// the record id); the Services are owned by the Pod, so deleting the Pod removes them.
//
// # Labels
//
// Every object carries the agentenv labels. Kubernetes label values are at most 63 characters
// of [A-Za-z0-9._-], so a value that does not fit is stored in a label-safe form
// (agentenv.expires as 20060102T150405Z, anything else as a digest), and the exact label map is
// kept in the annotation agentenv.labels, which is what List and Get report. Selectors are
// encoded the same way, so List by any label works.
//
// # Endpoints
//
// By default a sandbox's ports are reached through the API server's port-forward: the provider
// listens on 127.0.0.1 at a port the kernel picks and, for each connection accepted there, opens
// a port-forward stream to the Pod (client-go's SPDY transport). The listener lives in the
// process that reported the endpoint, until Terminate or Close. With Config.GatewayService set,
// the gateway's Service gets that type instead and its endpoint is the load balancer's address
// (LoadBalancer) or a node's address and node port (NodePort) once assigned.
//
// # Lifecycle
//
// Terminate deletes by label (the record id), with no live handle: the Pod with a bounded grace
// period, its Services, and for a network its NetworkPolicies and Namespace. A Pod that is
// absent, being deleted, or has completed counts as terminated. Get reports ErrGone for a Pod
// that has finished or is being deleted and ErrNotFound for one that does not exist. List does
// not report objects that are being deleted; Services left behind by a Pod deleted behind
// agentenv's back are listed as an exited sandbox, so a teardown removes them and reports the
// sandbox as already gone.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentenv/agentenv"
)

// Defaults for the zero values of Config.
const (
	DefaultNamespace      = "agentenv"
	DefaultQPS            = 200
	DefaultBurst          = 400
	DefaultConcurrency    = 32
	DefaultStopGrace      = time.Second
	DefaultTimeout        = 3 * time.Hour
	DefaultConnectTimeout = 10 * time.Second
	DefaultStartTimeout   = 5 * time.Minute
)

// ServiceAccountName is the ServiceAccount the provider makes in each namespace it creates and
// runs every Pod as. It mounts no token: sandboxes get no credentials for the cluster.
const ServiceAccountName = "agentenv-sandbox"

// Config configures a Provider. Zero values mean the documented defaults. Credentials and the
// cluster come only from here: a kubeconfig file and context, or the in-cluster config.
type Config struct {
	Name string // provider name as configured; default "kubernetes"

	// Kubeconfig is the kubeconfig file; default DefaultKubeconfig, else the in-cluster config
	// when running in a Pod.
	Kubeconfig string
	// Context is the kubeconfig context to use; default the file's current context.
	Context string
	// Namespace holds the sandboxes that join no network; default "agentenv", created on first
	// use. Networks (deployments) get a namespace of their own, named by their record id.
	Namespace string
	// NodeName, when set, is written into every Pod's spec.nodeName, bypassing the scheduler.
	// Leave it empty on a real cluster; set it on a control plane without a scheduler (kwok).
	NodeName string

	QPS         float32 // client-side request rate limit; default 200
	Burst       int     // client-side burst; default 400
	Concurrency int     // creates in flight at once in this process; default 32

	// GatewayService is the Service type of the gateway ("LoadBalancer" or "NodePort"); empty
	// means ClusterIP, with the gateway reached through port-forward like every component.
	GatewayService string

	StopGrace      time.Duration // grace period of a Pod deletion; default 1s
	DefaultTimeout time.Duration // activeDeadlineSeconds when a spec has neither Timeout nor Expires; default 3h
	ConnectTimeout time.Duration // bound on the first contact with the API server, and on opening a watch; default 10s
	StartTimeout   time.Duration // bound on a Create's wait for its Pod to run; default 5m

	// Unconfigured, when set, says why no cluster is chosen and what to set. The provider then
	// refuses every call, before contacting anything, with an error carrying it that wraps
	// ErrInvalid and ErrUnavailable: commands that do not name the provider are unaffected, and
	// a chain moves on to its next member.
	Unconfigured string
}

// Provider creates, finds and terminates sandboxes on a Kubernetes cluster. It is safe for
// concurrent use, and by several processes sharing the cluster.
type Provider struct {
	cfg  Config
	log  *slog.Logger
	sem  chan struct{}      // caps creates in flight
	root context.Context    // ends at Close; the shared pod watch runs on it
	stop context.CancelFunc // ends root

	watch podWatch

	connMu sync.Mutex
	api    API
	core   rest.Interface // the core group's REST client, for /version and port-forward
	rest   *rest.Config   // nil when api is not on a cluster (tests): endpoints are then not forwarded
	where  string         // the kubeconfig and context, for messages

	nsMu    sync.Mutex
	nsReady bool // Config.Namespace and its ServiceAccount exist

	fwMu     sync.Mutex
	forwards map[string]*forward // by namespace/pod/port
	closed   bool
}

var (
	_ agentenv.Provider  = (*Provider)(nil)
	_ agentenv.Networker = (*Provider)(nil)
)

// New returns a Provider for cfg. It does no I/O: the kubeconfig is read and the API server
// first contacted by the first call that needs it. A nil logger discards.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = "kubernetes"
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if err := checkName(cfg.Namespace); err != nil {
		return nil, fmt.Errorf("kubernetes: namespace: %w", err)
	}
	if cfg.NodeName != "" {
		if err := checkSubdomain(cfg.NodeName); err != nil {
			return nil, fmt.Errorf("kubernetes: node name: %w", err)
		}
	}
	switch cfg.GatewayService {
	case "", "ClusterIP", "LoadBalancer", "NodePort":
	default:
		return nil, fmt.Errorf("kubernetes: gateway service type %q: want LoadBalancer, NodePort or empty: %w", cfg.GatewayService, agentenv.ErrInvalid)
	}
	if cfg.QPS < 0 || cfg.Burst < 0 || cfg.Concurrency < 0 || cfg.StopGrace < 0 || cfg.DefaultTimeout < 0 ||
		cfg.ConnectTimeout < 0 || cfg.StartTimeout < 0 {
		return nil, fmt.Errorf("kubernetes: negative limits: %w", agentenv.ErrInvalid)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.StopGrace, DefaultStopGrace)
	def(&cfg.DefaultTimeout, DefaultTimeout)
	def(&cfg.ConnectTimeout, DefaultConnectTimeout)
	def(&cfg.StartTimeout, DefaultStartTimeout)
	if cfg.QPS == 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	root, stop := context.WithCancel(context.Background())
	p := &Provider{
		cfg: cfg, log: logger.With("provider", cfg.Name), sem: make(chan struct{}, cfg.Concurrency),
		root: root, stop: stop, forwards: map[string]*forward{},
	}
	return p, nil
}

// Name returns the configured name, "kubernetes" by default.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities reports what the kubernetes provider supports: container mode with private
// networks, list by label, and a backstop lifetime (activeDeadlineSeconds).
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{ListByLabel: true, BackstopLifetime: true, Egress: true, Isolate: true}
}

// Close stops every port-forward listener this provider opened and its shared Pod watch. The
// provider must not be used after.
func (p *Provider) Close() error {
	p.stop()
	p.fwMu.Lock()
	fws := p.forwards
	p.forwards, p.closed = map[string]*forward{}, true
	p.fwMu.Unlock()
	for _, f := range fws {
		f.close()
	}
	return nil
}

// API returns the typed clients the provider uses, connecting first, for callers that need more
// of the cluster (tests checking leftovers). It fails as every call does when the cluster is
// not configured or does not answer.
func (p *Provider) API(ctx context.Context) (API, error) {
	return p.client(ctx)
}

// client returns the API, loading the kubeconfig and checking that the API server answers on
// first use. A failure names the kubeconfig and context and wraps ErrUnavailable (ErrInvalid
// too for a provider that is not configured, and for a kubeconfig that cannot be used at all);
// it is not cached, so a later call retries.
func (p *Provider) client(ctx context.Context) (API, error) {
	if p.cfg.Unconfigured != "" {
		return nil, fmt.Errorf("kubernetes: no cluster configured: %s: %w: %w", p.cfg.Unconfigured, agentenv.ErrInvalid, agentenv.ErrUnavailable)
	}
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.api != nil {
		return p.api, nil
	}
	rc, where, err := p.loadConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %s: %w: %w", where, agentenv.ErrUnavailable, err)
	}
	rc.QPS, rc.Burst = p.cfg.QPS, p.cfg.Burst
	rc.UserAgent = "agentenv"
	api, err := newRESTAPI(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %s: %w: %w", where, agentenv.ErrInvalid, err)
	}
	// The version endpoint needs no permissions, so it tells reachability from authorization.
	cctx, cancel := context.WithTimeout(ctx, p.cfg.ConnectTimeout)
	defer cancel()
	body, err := api.core.Get().AbsPath("/version").Timeout(p.cfg.ConnectTimeout).Do(cctx).Raw()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("kubernetes: %s: %w", where, ctx.Err())
		}
		return nil, fmt.Errorf("kubernetes: cluster at %s (%s) does not answer: %w: %w", rc.Host, where, agentenv.ErrUnavailable, err)
	}
	p.log.Debug("connected", "host", rc.Host, "where", where, "version", string(body))
	p.api, p.core, p.rest, p.where = api, api.core, rc, where
	return api, nil
}

// DefaultKubeconfig returns the kubeconfig client-go reads when none is named: $KUBECONFIG (a
// list of files, merged) when set, else ~/.kube/config.
func DefaultKubeconfig() string {
	return firstNonEmpty(os.Getenv(clientcmd.RecommendedConfigPathEnvVar), clientcmd.RecommendedHomeFile)
}

// loadConfig resolves the REST config from Config: an explicit kubeconfig and context, the
// default loading rules, or the in-cluster config.
func (p *Provider) loadConfig() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	where := "kubeconfig " + DefaultKubeconfig()
	if p.cfg.Kubeconfig != "" {
		rules.ExplicitPath = p.cfg.Kubeconfig
		where = "kubeconfig " + p.cfg.Kubeconfig
	}
	if p.cfg.Context != "" {
		where += " context " + p.cfg.Context
	}
	if p.cfg.Kubeconfig == "" && p.cfg.Context == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, "in-cluster config", nil
		}
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: p.cfg.Context}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, where, err
	}
	return rc, where, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// kind maps an API error to an agentenv error kind, keeping the original in the chain.
func (p *Provider) kind(err error) error {
	var ne net.Error
	var ue *url.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, agentenv.ErrNotFound), errors.Is(err, agentenv.ErrGone),
		errors.Is(err, agentenv.ErrInvalid), errors.Is(err, agentenv.ErrUnavailable),
		errors.Is(err, agentenv.ErrConflict), errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return err
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %w", agentenv.ErrNotFound, err)
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return fmt.Errorf("%w: %w", agentenv.ErrConflict, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err):
		return fmt.Errorf("%w: %w", agentenv.ErrInvalid, err)
	case apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err),
		apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsInternalError(err),
		errors.As(err, &ne), errors.As(err, &ue):
		return fmt.Errorf("cluster (%s): %w: %w", p.where, agentenv.ErrUnavailable, err)
	}
	return err
}

// acquire takes a create slot, or fails when ctx ends first.
func (p *Provider) acquire(ctx context.Context) error {
	select {
	case p.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Provider) release() { <-p.sem }

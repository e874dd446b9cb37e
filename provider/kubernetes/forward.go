package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/agentenv/agentenv"
)

// forward is a listener on 127.0.0.1 whose connections are each carried to one port of one Pod
// by a port-forward stream through the API server. It dials the API server only when a
// connection arrives, so reporting an endpoint costs no request.
type forward struct {
	p         *Provider
	ln        net.Listener
	ns, pod   string
	port      int
	closeOnce sync.Once
	done      chan struct{}
}

// endpoints returns the caller-reachable address of each container port of a running Pod:
// the gateway's Service address when Config.GatewayService is set and assigned, else a
// port-forward listener on 127.0.0.1 (one per Pod and port, reused by later calls).
func (p *Provider) endpoints(ctx context.Context, api API, pod *corev1.Pod, svcs []corev1.Service) (map[string]string, error) {
	out := map[string]string{}
	if len(pod.Spec.Containers) == 0 {
		return out, nil
	}
	for _, cp := range pod.Spec.Containers[0].Ports {
		port := int(cp.ContainerPort)
		key := strconv.Itoa(port)
		if addr := p.serviceEndpoint(ctx, api, pod, svcs, port); addr != "" {
			out[key] = addr
			continue
		}
		if p.rest == nil {
			continue // an API not on a cluster (unit tests) cannot forward
		}
		addr, err := p.forwardFor(pod.Namespace, pod.Name, port)
		if err != nil {
			return nil, fmt.Errorf("forward port %d: %w", port, err)
		}
		out[key] = addr
	}
	return out, nil
}

// serviceEndpoint returns the external address of the gateway's Service for port, or "".
func (p *Provider) serviceEndpoint(ctx context.Context, api API, pod *corev1.Pod, svcs []corev1.Service, port int) string {
	if p.cfg.GatewayService == "" || readLabels(pod.Labels, pod.Annotations)[agentenv.LabelRole] != roleGateway {
		return ""
	}
	for _, svc := range svcs {
		if svc.Namespace != pod.Namespace || svc.Spec.Selector[agentenv.LabelRecord] != pod.Labels[agentenv.LabelRecord] {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if int(sp.Port) != port {
				continue
			}
			switch svc.Spec.Type {
			case corev1.ServiceTypeLoadBalancer:
				for _, ing := range svc.Status.LoadBalancer.Ingress {
					if host := firstNonEmpty(ing.IP, ing.Hostname); host != "" {
						return net.JoinHostPort(host, strconv.Itoa(port))
					}
				}
			case corev1.ServiceTypeNodePort:
				if sp.NodePort == 0 || pod.Spec.NodeName == "" {
					continue
				}
				node, err := api.Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
				if err != nil {
					p.log.Debug("node of the gateway", "node", pod.Spec.NodeName, "err", err)
					continue
				}
				for _, a := range node.Status.Addresses {
					if a.Type == corev1.NodeExternalIP || a.Type == corev1.NodeInternalIP {
						return net.JoinHostPort(a.Address, strconv.Itoa(int(sp.NodePort)))
					}
				}
			}
		}
	}
	return ""
}

// forwardFor returns the local address forwarding to port of pod ns/name, listening first if
// this process has no forward for it yet.
func (p *Provider) forwardFor(ns, name string, port int) (string, error) {
	key := ns + "/" + name + "/" + strconv.Itoa(port)
	p.fwMu.Lock()
	defer p.fwMu.Unlock()
	if p.closed {
		return "", fmt.Errorf("provider closed: %w", agentenv.ErrUnavailable)
	}
	if f, ok := p.forwards[key]; ok {
		return f.ln.Addr().String(), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen: %w", err)
	}
	f := &forward{p: p, ln: ln, ns: ns, pod: name, port: port, done: make(chan struct{})}
	p.forwards[key] = f
	go f.serve()
	p.log.Debug("port-forward listening", "pod", ns+"/"+name, "port", port, "addr", ln.Addr().String())
	return ln.Addr().String(), nil
}

// closeForwards stops the forwards of pod ns/name.
func (p *Provider) closeForwards(ns, name string) {
	prefix := ns + "/" + name + "/"
	p.fwMu.Lock()
	var fws []*forward
	for k, f := range p.forwards {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			fws = append(fws, f)
			delete(p.forwards, k)
		}
	}
	p.fwMu.Unlock()
	for _, f := range fws {
		f.close()
	}
}

func (f *forward) close() {
	f.closeOnce.Do(func() {
		close(f.done)
		f.ln.Close()
	})
}

// serve accepts connections until the listener is closed.
func (f *forward) serve() {
	for {
		conn, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.carry(conn)
	}
}

// carry copies one local connection to and from the Pod's port over a new port-forward
// connection, until either side closes or the forward is closed.
func (f *forward) carry(conn net.Conn) {
	defer conn.Close()
	log := f.p.log.With("pod", f.ns+"/"+f.pod, "port", f.port)
	p := f.p
	p.connMu.Lock()
	rc, core := p.rest, p.core
	p.connMu.Unlock()
	transport, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		log.Debug("port-forward transport", "err", err)
		return
	}
	u := core.Post().Resource("pods").Namespace(f.ns).Name(f.pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	streams, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		log.Debug("port-forward dial", "err", err)
		return
	}
	defer streams.Close()
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(f.port))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := streams.CreateStream(headers)
	if err != nil {
		log.Debug("port-forward error stream", "err", err)
		return
	}
	errStream.Close() // nothing to send on it
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := streams.CreateStream(headers)
	if err != nil {
		log.Debug("port-forward data stream", "err", err)
		return
	}
	remoteErr := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(io.LimitReader(errStream, 64<<10)) // an error message; more is not one
		switch {
		case err != nil:
			remoteErr <- err
		case len(msg) > 0:
			remoteErr <- errors.New(string(msg))
		default:
			remoteErr <- nil
		}
	}()
	copied := make(chan struct{}, 2)
	go func() {
		io.Copy(data, conn)
		data.Close() // half-close: the Pod sees EOF
		copied <- struct{}{}
	}()
	go func() {
		io.Copy(conn, data)
		copied <- struct{}{}
	}()
	select {
	case <-copied:
	case err := <-remoteErr:
		if err != nil {
			log.Debug("port-forward", "err", err)
		}
		<-copied
	case <-f.done:
	case <-streams.CloseChan():
	}
}

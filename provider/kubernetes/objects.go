package kubernetes

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/registrylogin"
)

// ContainerName is the name of the one container of every sandbox Pod.
const ContainerName = "main"

// Roles the NetworkPolicies name (the values of agentenv.role that package deploy writes).
const (
	roleGateway   = "gateway"
	roleMCPServer = "mcp_server"
	roleServiceDB = "service_db"
	roleDBMCP     = "db_mcp"
	roleDBWeb     = "db_web"
)

// Policy names, one per rule of a deployment's network.
const (
	PolicyDefaultDeny     = "agentenv-default-deny"
	PolicyGatewayIngress  = "agentenv-gateway-ingress"
	PolicyServersIngress  = "agentenv-servers-from-gateway"
	PolicyServiceDBAccess = "agentenv-servicedb-from-servers"
	PolicyEgress          = "agentenv-egress"
)

// requestShare is the part of a limit a container requests: a deployment of several
// components schedules on a small node, and each is still capped at its limit.
const requestShare = 4

// podFor maps spec to the Pod of record spec.Name in namespace ns. It does no I/O.
func (p *Provider) podFor(ns string, spec agentenv.SandboxSpec, now time.Time) (*corev1.Pod, error) {
	if spec.Image == "" {
		return nil, fmt.Errorf("no image: %w", agentenv.ErrInvalid)
	}
	if spec.Memory < 0 || spec.CPUs < 0 {
		return nil, fmt.Errorf("negative limits: %w", agentenv.ErrInvalid)
	}
	if len(spec.Files) > 0 {
		return nil, fmt.Errorf("files: not supported by the kubernetes provider: %w", agentenv.ErrInvalid)
	}
	deadline := p.deadline(spec, now)
	lbl, ann, err := objectLabels(specLabels(spec.Labels, now.Add(time.Duration(deadline)*time.Second)))
	if err != nil {
		return nil, err
	}
	image := spec.Image
	if spec.Pinned != "" {
		// Pulled by digest; Create puts spec.Image back if the node cannot pull it.
		image = spec.Pinned
	}
	c := corev1.Container{
		Name:       ContainerName,
		Image:      image,
		Args:       slices.Clone(spec.Command),
		WorkingDir: spec.WorkDir,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: new(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	// The values live in the sandbox's Secret (secretFor), never in the Pod: an env holds
	// DSNs with passwords and tokens, and reading Pods is a wider right than reading Secrets.
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: spec.Name}, Key: k},
		}})
	}
	for _, ca := range spec.CapAdd {
		c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, corev1.Capability(ca))
	}
	for _, port := range spec.Ports {
		if port < 1 || port > 65535 {
			return nil, fmt.Errorf("port %d: want 1-65535: %w", port, agentenv.ErrInvalid)
		}
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: portName(port), ContainerPort: int32(port), Protocol: corev1.ProtocolTCP})
	}
	if spec.Memory > 0 || spec.CPUs > 0 {
		c.Resources.Limits = corev1.ResourceList{}
		c.Resources.Requests = corev1.ResourceList{}
		if spec.Memory > 0 {
			c.Resources.Limits[corev1.ResourceMemory] = *resource.NewQuantity(spec.Memory, resource.BinarySI)
			c.Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(spec.Memory/requestShare, resource.BinarySI)
		}
		if spec.CPUs > 0 {
			milli := int64(math.Ceil(spec.CPUs * 1000))
			c.Resources.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
			c.Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(1, milli/requestShare), resource.DecimalSI)
		}
	}
	pod := &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if spec.NonRoot {
		pod.RunAsNonRoot = new(true)
	}
	grace := int64(p.cfg.StopGrace.Round(time.Second) / time.Second)
	var pullSecrets []corev1.LocalObjectReference
	if spec.Pinned != "" && spec.PullAuth != nil {
		pullSecrets = []corev1.LocalObjectReference{{Name: pullSecretName(spec.Name)}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: ns, Labels: lbl, Annotations: ann},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{c},
			SecurityContext:               pod,
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			NodeName:                      p.cfg.NodeName,
			ServiceAccountName:            ServiceAccountName,
			AutomountServiceAccountToken:  new(false),
			EnableServiceLinks:            new(false),
			ImagePullSecrets:              pullSecrets,
		},
	}, nil
}

// pullSecretName is the name of the image pull Secret of the Pod of record id.
func pullSecretName(id string) string { return id + "-pull" }

// pullSecretFor returns the image pull Secret of pod (type kubernetes.io/dockerconfigjson) that
// logs in to the registry of spec.Pinned with spec.PullAuth; nil without both. It carries the
// Pod's labels, so that Terminate by record id finds it, as the environment's Secret does.
func pullSecretFor(pod *corev1.Pod, spec agentenv.SandboxSpec) *corev1.Secret {
	if spec.Pinned == "" || spec.PullAuth == nil {
		return nil
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: pullSecretName(pod.Name), Namespace: pod.Namespace,
			Labels: maps.Clone(pod.Labels), Annotations: maps.Clone(pod.Annotations),
		},
		Type:      corev1.SecretTypeDockerConfigJson,
		Immutable: new(true),
		Data:      map[string][]byte{corev1.DockerConfigJsonKey: registrylogin.DockerConfig(spec.Pinned, *spec.PullAuth)},
	}
}

// secretFor returns the Secret holding the environment of pod, whose container reads each
// variable from it; nil when the sandbox has no environment. It carries the Pod's labels, so
// that Terminate by record id finds it even when the Pod was never made.
func secretFor(pod *corev1.Pod, env map[string]string) *corev1.Secret {
	if len(env) == 0 {
		return nil
	}
	data := make(map[string][]byte, len(env))
	for k, v := range env {
		data[k] = []byte(v)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace,
			Labels: maps.Clone(pod.Labels), Annotations: maps.Clone(pod.Annotations),
		},
		Type:      corev1.SecretTypeOpaque,
		Immutable: new(true),
		Data:      data,
	}
}

// deadline returns activeDeadlineSeconds for spec: its Timeout, else the time to Expires, else
// Config.DefaultTimeout; at least one second.
func (p *Provider) deadline(spec agentenv.SandboxSpec, now time.Time) int64 {
	d := spec.Timeout
	if d <= 0 && !spec.Expires.IsZero() {
		d = spec.Expires.Sub(now)
	}
	if d <= 0 && spec.Expires.IsZero() {
		d = p.cfg.DefaultTimeout
	}
	return max(1, int64(math.Ceil(d.Seconds())))
}

func portName(port int) string { return "p" + strconv.Itoa(port) }

// servicesFor returns the Services of a sandbox Pod: one per alias, or one named by the record
// id when the sandbox has ports and no alias. Each selects the Pod by its record label and is
// owned by it.
func (p *Provider) servicesFor(pod *corev1.Pod, spec agentenv.SandboxSpec) ([]*corev1.Service, error) {
	names := slices.Clone(spec.Aliases)
	if len(names) == 0 && len(spec.Ports) > 0 {
		names = []string{spec.Name}
	}
	var out []*corev1.Service
	for _, name := range names {
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("alias: %w", err)
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: pod.Namespace,
				Labels: maps.Clone(pod.Labels), Annotations: maps.Clone(pod.Annotations),
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
					BlockOwnerDeletion: new(true),
				}},
			},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{agentenv.LabelRecord: pod.Labels[agentenv.LabelRecord]},
				Type:     corev1.ServiceTypeClusterIP,
			},
		}
		for _, port := range spec.Ports {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
				Name: portName(port), Port: int32(port), TargetPort: intstr.FromInt32(int32(port)), Protocol: corev1.ProtocolTCP,
			})
		}
		if len(svc.Spec.Ports) == 0 {
			svc.Spec.ClusterIP = corev1.ClusterIPNone // headless: a name, no ports
		} else if p.cfg.GatewayService != "" && spec.Labels[agentenv.LabelRole] == roleGateway {
			svc.Spec.Type = corev1.ServiceType(p.cfg.GatewayService)
		}
		out = append(out, svc)
	}
	return out, nil
}

// namespaceFor returns the Namespace of network record spec.Name.
func namespaceFor(spec agentenv.NetworkSpec, lbl, ann map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: lbl, Annotations: ann}}
}

// serviceAccountFor returns the ServiceAccount every sandbox of namespace ns runs as.
func serviceAccountFor(ns string, lbl, ann map[string]string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: ServiceAccountName, Namespace: ns, Labels: lbl, Annotations: ann},
		AutomountServiceAccountToken: new(false),
	}
}

// policiesFor returns the NetworkPolicies of a deployment's namespace: deny all ingress; let
// anyone reach the gateway (it is the deployment's front door, and authenticates callers); let
// only the gateway reach the MCP servers and db-mcp; let only the servers and the DB sidecars reach the
// service DB. Port-forwards enter a Pod through its node and are not subject to them.
// PolicyEgress lets the deployment's Pods reach only each other, DNS (port 53 anywhere, so
// that node-local resolvers work too) and the env's egress list (one rule per entry: its
// address range, on its TCP port or every port), so a server cannot call out of its
// deployment anywhere else.
func policiesFor(ns string, lbl, ann map[string]string, egress []agentenv.EgressRule) []*networkingv1.NetworkPolicy {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: maps.Clone(lbl), Annotations: maps.Clone(ann)}
	}
	ingress := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	role := func(r string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{agentenv.LabelRole: r}}
	}
	from := func(roles ...string) []networkingv1.NetworkPolicyPeer {
		var peers []networkingv1.NetworkPolicyPeer
		for _, r := range roles {
			sel := role(r)
			peers = append(peers, networkingv1.NetworkPolicyPeer{PodSelector: &sel})
		}
		return peers
	}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	out := []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}},
		{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}}},
	}
	for _, e := range egress {
		rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: e.CIDR}}}}
		if e.Port > 0 {
			port := intstr.FromInt32(int32(e.Port))
			rule.Ports = []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}
		}
		out = append(out, rule)
	}
	return []*networkingv1.NetworkPolicy{
		{ObjectMeta: meta(PolicyEgress), Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      out,
		}},
		{ObjectMeta: meta(PolicyDefaultDeny), Spec: networkingv1.NetworkPolicySpec{PolicyTypes: ingress}},
		{ObjectMeta: meta(PolicyGatewayIngress), Spec: networkingv1.NetworkPolicySpec{
			PodSelector: role(roleGateway), PolicyTypes: ingress,
			Ingress: []networkingv1.NetworkPolicyIngressRule{{}},
		}},
		{ObjectMeta: meta(PolicyServersIngress), Spec: networkingv1.NetworkPolicySpec{
			// db-mcp is one of the gateway's backends too, and has no other door.
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: agentenv.LabelRole, Operator: metav1.LabelSelectorOpIn, Values: []string{roleMCPServer, roleDBMCP},
			}}},
			PolicyTypes: ingress,
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: from(roleGateway)}},
		}},
		{ObjectMeta: meta(PolicyServiceDBAccess), Spec: networkingv1.NetworkPolicySpec{
			PodSelector: role(roleServiceDB), PolicyTypes: ingress,
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: from(roleMCPServer, roleDBMCP, roleDBWeb)}},
		}},
	}
}

// state maps a Pod to a sandbox state and exit code.
func state(pod *corev1.Pod) (agentenv.SandboxState, int) {
	switch pod.Status.Phase {
	case corev1.PodRunning:
		return agentenv.SandboxRunning, 0
	case corev1.PodSucceeded, corev1.PodFailed:
		code := 0
		if pod.Status.Phase == corev1.PodFailed {
			code = 1
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == ContainerName && cs.State.Terminated != nil {
				code = int(cs.State.Terminated.ExitCode)
			}
		}
		return agentenv.SandboxExited, code
	}
	return agentenv.SandboxCreating, 0
}

// waitingProblem returns why a pending Pod will not start on its own (an image that cannot be
// pulled, a bad command), or "", and whether it is its image's pull. A status of another image
// than the container's (one the Pod was patched away from) is not read.
func waitingProblem(pod *corev1.Pod) (why string, pull bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == cs.Name })
		if i >= 0 && cs.Image != "" && cs.Image != pod.Spec.Containers[i].Image {
			continue
		}
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName":
				return w.Reason + ": " + w.Message, true
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return w.Reason + ": " + w.Message, false
			}
		}
	}
	return "", false
}

// pullError is waitStarted's error for a Pod whose image the node cannot pull.
type pullError struct {
	why string // the node's reason and message
	err error
}

func (e *pullError) Error() string { return e.err.Error() }
func (e *pullError) Unwrap() error { return e.err }

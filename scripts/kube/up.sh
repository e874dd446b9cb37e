#!/usr/bin/env bash
# up.sh starts a local Kubernetes control plane for the kubernetes provider's integration tier:
# Debian's etcd, kube-apiserver and kwok (simulated nodes and Pod phases; no real containers
# run), all on 127.0.0.1 at free ports, with their state and logs in a new temp dir.
#
# It builds nothing: run scripts/kube/build.sh first (it caches the binaries). On success it
# prints shell lines to eval:
#   export KUBECONFIG=DIR/kubeconfig AGENTENV_TEST_KUBECONFIG=DIR/kubeconfig AGENTENV_KUBE_DIR=DIR
# Stop everything with scripts/kube/down.sh DIR (it kills the pids in DIR/pids).
#
# The cluster has one fake Node, kwok-node-0 (annotation kwok.x-k8s.io/node=fake), and no
# scheduler, controller-manager or kubelet: Pods need spec.nodeName, namespaces are not emptied
# on deletion and owner references are not garbage collected. The API server runs without its
# watch cache: etcd 3.4 sends no progress notifications, so a cached watch of a quiet resource
# waits for a revision it never sees ("Too large resource version") and kwok lags by seconds. kwok moves Pods to Running, runs
# Pods whose first argument is "agentenv-kwok-exit" to Failed with the exit code in the second
# argument, keeps Pods whose image is registry.agentenv.invalid/unpullable@sha256:0...0 Pending in
# ErrImagePull (an image the node cannot pull) until their image changes, and answers
# port-forwards to any Pod port with an HTTP 200 "ok".
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
CACHE=${AGENTENV_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/kube}
APISERVER=$CACHE/kube-apiserver-$KUBE_VERSION/kube-apiserver
KWOK=$CACHE/kwok-$KWOK_VERSION/kwok
STAGES=$CACHE/kwok-$KWOK_VERSION/stages
NODE=kwok-node-0

log() { printf 'kube/up: %s\n' "$*" >&2; }
for b in "$APISERVER" "$KWOK"; do
	[ -x "$b" ] || { log "$b missing: run scripts/kube/build.sh"; exit 1; }
done
command -v etcd >/dev/null || { log "etcd missing: run scripts/kube/build.sh"; exit 1; }
command -v openssl >/dev/null || { log "openssl missing"; exit 1; }

DIR=$(mktemp -d "${TMPDIR:-/tmp}/agentenv-kube.XXXXXX")
touch "$DIR/pids"
fail() {
	log "$*; logs in $DIR"
	"$(dirname "$0")/down.sh" "$DIR" --keep-dir >&2 || true
	exit 1
}

# Free ports, asked of the kernel. A port could be taken between here and the bind; then the
# start fails loudly and a rerun picks others.
read -r ETCD_PORT PEER_PORT API_PORT KWOK_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

TOKEN=$(openssl rand -hex 16)
echo "$TOKEN,agentenv-admin,agentenv-admin,system:masters" >"$DIR/tokens.csv"
openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null
openssl rsa -in "$DIR/sa.key" -pubout -out "$DIR/sa.pub" 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=kwok -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$DIR/kwok.key" -out "$DIR/kwok.crt" 2>/dev/null

start() { # name, then the command; output to DIR/name.log, pid to DIR/pids
	local name=$1
	shift
	setsid "$@" >"$DIR/$name.log" 2>&1 </dev/null &
	echo "$! $name" >>"$DIR/pids"
}

# wait_for deadline_seconds what command...: retries command until it succeeds or the wall-clock
# deadline passes.
wait_for() {
	local secs=$1 until=$((SECONDS + $1)) what=$2
	shift 2
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$until" ] || fail "$what not ready within ${secs}s"
		sleep 0.2
	done
}

start etcd etcd --name default --data-dir "$DIR/etcd" \
	--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
	--initial-cluster "default=http://127.0.0.1:$PEER_PORT" --quota-backend-bytes=2147483648
wait_for 30 etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

start kube-apiserver "$APISERVER" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
	--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
	--endpoint-reconciler-type=none --token-auth-file="$DIR/tokens.csv" --authorization-mode=RBAC \
	--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$DIR/sa.pub" \
	--service-account-signing-key-file="$DIR/sa.key" --service-cluster-ip-range=10.96.0.0/16 \
	--cert-dir="$DIR/certs" --kubelet-preferred-address-types=InternalIP \
	--max-requests-inflight=800 --max-mutating-requests-inflight=400 \
	--watch-cache=false
wait_for 90 kube-apiserver curl -fsSk -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/readyz"

cat >"$DIR/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: agentenv-local
  cluster:
    server: https://127.0.0.1:$API_PORT
    insecure-skip-tls-verify: true
users:
- name: agentenv-admin
  user:
    token: $TOKEN
contexts:
- name: agentenv-local
  context:
    cluster: agentenv-local
    user: agentenv-admin
current-context: agentenv-local
KC

api() { # method path [json]
	curl -fsSk -X "$1" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
		"https://127.0.0.1:$API_PORT$2" ${3:+-d "$3"}
}
wait_for 30 "default namespace" api GET /api/v1/namespaces/default
api POST /api/v1/namespaces/default/serviceaccounts '{"metadata":{"name":"default"}}' >/dev/null
api POST /api/v1/nodes '{"metadata":{"name":"'$NODE'","annotations":{"kwok.x-k8s.io/node":"fake"},"labels":{"type":"kwok","kubernetes.io/hostname":"'$NODE'"}}}' >/dev/null

cat >"$DIR/kwok-agentenv.yaml" <<'KW'
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: agentenv-exit
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.spec.containers.[0].args.[0]'
      operator: 'In'
      values:
      - 'agentenv-kwok-exit'
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $code := index (index .spec.containers 0).args 1 }}
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{ $code }}
            finishedAt: {{ $now | Quote }}
            reason: Error
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Failed
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: agentenv-unpullable
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  # Chosen over pod-ready, which matches the same Pods, for as long as the image is this one.
  weight: 1
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.spec.containers.[0].image'
      operator: 'In'
      values:
      - 'registry.agentenv.invalid/unpullable@sha256:0000000000000000000000000000000000000000000000000000000000000000'
  next:
    statusTemplate: |
      phase: Pending
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          waiting:
            reason: ErrImagePull
            message: "failed to pull and unpack image: unauthorized"
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata:
  name: agentenv-http-ok
spec:
  forwards:
  - command:
    - sh
    - -c
    - |
      read -r line
      printf 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok'
KW

CONFIGS=$DIR/kwok-agentenv.yaml
for f in "$STAGES"/*.yaml; do
	[ "$(basename "$f")" = kustomization.yaml ] || CONFIGS=$CONFIGS,$f
done
start kwok env KUBE_FEATURE_WatchListClient=false "$KWOK" --kubeconfig="$DIR/kubeconfig" --config="$CONFIGS" \
	--manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
	--node-ip=127.0.0.1 --node-port="$KWOK_PORT" --server-address="127.0.0.1:$KWOK_PORT" \
	--tls-cert-file="$DIR/kwok.crt" --tls-private-key-file="$DIR/kwok.key"
node_ready() {
	api GET "/api/v1/nodes/$NODE" | python3 -c '
import json, sys
conds = json.load(sys.stdin).get("status", {}).get("conditions", [])
sys.exit(0 if any(c["type"] == "Ready" and c["status"] == "True" for c in conds) else 1)'
}
wait_for 60 "kwok node $NODE" node_ready

log "up in $DIR (apiserver https://127.0.0.1:$API_PORT, node $NODE)"
echo "export KUBECONFIG=$DIR/kubeconfig AGENTENV_TEST_KUBECONFIG=$DIR/kubeconfig AGENTENV_KUBE_DIR=$DIR"

#!/bin/bash
# The agent's report is right, and the environment holds what it reports: through the proxy an
# allowed host gets past the allowlist and the others are refused 403; without the proxy
# nothing gets out, not even to an allowed host. With EGRESS_SERVER (HOST:PORT of a server
# answering "ok") set, that server is reached through the proxy both ways (CONNECT, and an
# absolute http:// URI) and not without it.
set -u
mkdir -p /logs/verifier
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }

[ -n "${HTTPS_PROXY:-}" ] && [ "${HTTP_PROXY:-}" = "$HTTPS_PROXY" ] || fail "HTTP_PROXY/HTTPS_PROXY not set"
proxy=${HTTPS_PROXY#http://}
phost=${proxy%:*} pport=${proxy##*:}

# connect HOST:PORT prints the status of the proxy's answer to CONNECT HOST:PORT; with a
# second argument, it then sends GET / through the tunnel and prints the answer's body after.
connect() {
  exec 3<>"/dev/tcp/$phost/$pport" || return 1
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$1" "$1" >&3
  local code line
  read -r -t 60 _ code _ <&3
  echo "$code"
  if [ $# -gt 1 ] && [ "$code" = 200 ]; then
    while IFS= read -r -t 60 line <&3 && [ "${line%$'\r'}" != "" ]; do :; done
    printf 'GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$1" >&3
    while IFS= read -r -t 60 line <&3 && [ "${line%$'\r'}" != "" ]; do :; done
    cat <&3
  fi
  exec 3<&-
}

# get URL prints the body of GET URL asked of the proxy as an absolute URI.
get() {
  exec 3<>"/dev/tcp/$phost/$pport" || return 1
  local rest=${1#http://} line
  printf 'GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$1" "${rest%%/*}" >&3
  while IFS= read -r -t 60 line <&3 && [ "${line%$'\r'}" != "" ]; do :; done
  cat <&3
  exec 3<&-
}

# direct HOST PORT succeeds if a connection without the proxy opens.
direct() { timeout 5 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

want=$'allowed.test allowed\napi.allowed.test allowed\ndenied.test denied\nallowed.test.evil.test denied\n203.0.113.9 denied'
[ "$(cat /app/report.txt 2>/dev/null)" = "$want" ] || fail "report.txt is not right: $(head -c 300 /app/report.txt 2>&1)"

for target in denied.test:80 allowed.test.evil.test:443 203.0.113.9:80 1.1.1.1:443 "[2606:4700::1111]:443"; do
  code=$(connect "$target")
  [ "$code" = 403 ] || fail "CONNECT $target: $code, want 403"
done
for target in allowed.test:80 WWW.allowed.test:443; do
  code=$(connect "$target")
  [ -n "$code" ] && [ "$code" != 403 ] || fail "CONNECT $target: '$code', want it past the allowlist"
done
body=$(get http://denied.test/)
case "$body" in *"not in the task's allowed_hosts"*) ;; *) fail "GET http://denied.test/: $body" ;; esac

direct 1.1.1.1 80 && fail "a direct connection to 1.1.1.1:80 opened"
direct "$phost" "$pport" || fail "the proxy is not reachable at $phost:$pport"
timeout 5 getent hosts allowed.test >/dev/null && fail "allowed.test resolves without the proxy"

if [ -n "${EGRESS_SERVER:-}" ]; then
  # The server may join the proxy's reach a little after the run starts: wait for it.
  for _ in $(seq 90); do
    [ "$(connect "$EGRESS_SERVER" get | tail -n 1)" = ok ] && break
    sleep 1
  done
  out=$(connect "$EGRESS_SERVER" get)
  [ "$(echo "$out" | tail -n 1)" = ok ] || fail "GET / through CONNECT $EGRESS_SERVER: $out"
  [ "$(get "http://$EGRESS_SERVER/")" = ok ] || fail "GET http://$EGRESS_SERVER/ through the proxy: $(get "http://$EGRESS_SERVER/")"
  direct "${EGRESS_SERVER%:*}" "${EGRESS_SERVER##*:}" && fail "a direct connection to $EGRESS_SERVER opened"
fi
echo 1 > /logs/verifier/reward.txt

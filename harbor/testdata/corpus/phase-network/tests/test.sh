#!/bin/bash
# The agent's phase let through *.agent.test and nothing else (its report); the verifier's
# phase lets nothing through: every CONNECT is refused 403, the tunnel the agent held open is
# closed, and nothing gets out without the proxy.
set -u
mkdir -p /logs/verifier
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }

proxy=${HTTPS_PROXY#http://}
phost=${proxy%:*} pport=${proxy##*:}
connect() {
  exec 3<>"/dev/tcp/$phost/$pport" || return 1
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$1" "$1" >&3
  local code
  read -r -t 60 _ code _ <&3
  exec 3<&-
  echo "$code"
}

want=$'www.agent.test allowed\nother.test denied'
[ "$(cat /app/report.txt 2>/dev/null)" = "$want" ] || fail "report.txt is not right: $(head -c 300 /app/report.txt 2>&1)"
for target in www.agent.test:80 other.test:80 ${EGRESS_SERVER:-}; do
  code=$(connect "$target")
  [ "$code" = 403 ] || fail "CONNECT $target in the verifier's phase: $code, want 403"
done
timeout 5 bash -c "exec 3<>/dev/tcp/1.1.1.1/80" 2>/dev/null && fail "a direct connection to 1.1.1.1:80 opened"
if [ -n "${EGRESS_SERVER:-}" ]; then
  [ "$(cat /app/held.status 2>/dev/null)" = 200 ] || fail "the agent's tunnel to $EGRESS_SERVER was not opened: $(cat /app/held.status 2>&1)"
  [ "$(cat /app/held.count 2>/dev/null || echo 0)" -gt 0 ] || fail "the agent's tunnel to $EGRESS_SERVER carried no answer"
  for _ in $(seq 10); do [ -f /app/held.closed ] && break; sleep 1; done
  [ -f /app/held.closed ] || fail "the tunnel the agent opened to $EGRESS_SERVER is still open in the verifier's phase"
fi
echo 1 > /logs/verifier/reward.txt

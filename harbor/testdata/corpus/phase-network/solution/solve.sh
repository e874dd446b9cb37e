#!/bin/bash
# In the agent's phase the proxy lets through *.agent.test only. Ask it for a tunnel to each
# host: 403 is its refusal; anything else (200, or 502 when the name does not resolve) got
# past it. With EGRESS_SERVER (a server under agent.test), also hold a tunnel to it open in the
# background, which the verifier's phase (no network) must see closed.
set -u
proxy=${HTTPS_PROXY#http://}
phost=${proxy%:*} pport=${proxy##*:}
: > /app/report.txt
for host in www.agent.test other.test; do
  exec 3<>"/dev/tcp/$phost/$pport"
  printf 'CONNECT %s:80 HTTP/1.1\r\nHost: %s:80\r\n\r\n' "$host" "$host" >&3
  read -r -t 60 _ code _ <&3
  exec 3<&-
  if [ "$code" = 403 ]; then echo "$host denied"; else echo "$host allowed"; fi >> /app/report.txt
done
if [ -n "${EGRESS_SERVER:-}" ]; then
  # The held tunnel outlives the agent's phase as an agent that means harm would make it do
  # (a session of its own, out of the agent's process group): it asks the server for / every
  # second, so that the server keeps it open, counting the answers, until the proxy closes it.
  cat > /app/hold.sh <<'HOLD'
set -u
trap '' PIPE # a write to a closed tunnel fails; it does not end the script
phost=$1 pport=$2 server=$3
for _ in $(seq 90); do
  exec 3<>"/dev/tcp/$phost/$pport"
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$server" "$server" >&3
  read -r -t 60 _ code _ <&3
  [ "$code" = 200 ] && break
  exec 3<&-
  sleep 1
done
while IFS= read -r -t 10 line <&3 && [ "${line%$'\r'}" != "" ]; do :; done
echo "$code" > /app/held.status
n=0
while printf 'GET / HTTP/1.1\r\nHost: %s\r\n\r\n' "$server" >&3 2>/dev/null; do
  read -r -t 10 _ _ _ <&3 || break
  len=0
  while IFS= read -r -t 10 line <&3; do
    line=${line%$'\r'}
    [ -z "$line" ] && break
    case "${line,,}" in content-length:*) len=${line#*:}; len=${len// /} ;; esac
  done
  if [ "$len" -gt 0 ]; then read -r -N "$len" -t 10 _ <&3 || break; fi
  n=$((n + 1))
  echo "$n" > /app/held.count
  sleep 1
done
echo closed > /app/held.closed
HOLD
  setsid bash /app/hold.sh "$phost" "$pport" "$EGRESS_SERVER" </dev/null >/dev/null 2>&1 &
  for _ in $(seq 120); do [ -s /app/held.count ] && break; sleep 1; done
fi

#!/bin/bash
# Ask the proxy for a tunnel to each host: 403 is its refusal; anything else (200, or 502 when
# an allowed name does not resolve) got past the allowlist.
set -u
proxy=${HTTPS_PROXY#http://}
: > /app/report.txt
while read -r host; do
  exec 3<>"/dev/tcp/${proxy%:*}/${proxy##*:}"
  printf 'CONNECT %s:80 HTTP/1.1\r\nHost: %s:80\r\n\r\n' "$host" "$host" >&3
  read -r -t 60 _ code _ <&3
  exec 3<&-
  if [ "$code" = 403 ]; then echo "$host denied"; else echo "$host allowed"; fi >> /app/report.txt
done < /app/hosts.txt

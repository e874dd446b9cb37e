#!/bin/bash
# Speak MCP over HTTP to the mcp-server service as a client would, with bash's /dev/tcp (the
# image has no curl): get_code over streamable HTTP at /mcp, get_word over SSE at /sse.
set -euo pipefail
host=${MCP_HOST:-mcp-server}
port=${MCP_PORT:-8000}

# post PATH JSON [FD]: POST JSON to PATH; prints the answer's body (streamable HTTP answers
# with JSON), or nothing when the answer comes on an SSE stream.
post() {
  exec 4<>"/dev/tcp/$host/$port"
  printf 'POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "$1" "$host" "${#2}" "$2" >&4
  sed '1,/^\r$/d' <&4
  exec 4<&-
}
text() { sed -n 's/.*"text":"\([^"]*\)".*/\1/p' | head -n 1; }

code=$(post /mcp '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_code","arguments":{}}}' | text)

# SSE: hold the event stream open, read where to post, post the calls, read the answer on it.
exec 3<>"/dev/tcp/$host/$port"
printf 'GET /sse HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n' "$host" >&3
endpoint=
while IFS= read -r -t 10 line <&3; do
  line=${line%$'\r'}
  case "$line" in data:*) endpoint=${line#data: }; break ;; esac
done
post "$endpoint" '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"solve","version":"1"}}}' >/dev/null
post "$endpoint" '{"jsonrpc":"2.0","method":"notifications/initialized"}' >/dev/null
post "$endpoint" '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_word","arguments":{}}}' >/dev/null
word=
while IFS= read -r -t 10 line <&3; do
  case "$line" in data:*'"id":2'*) word=$(printf '%s\n' "$line" | text); break ;; esac
done
exec 3<&-
printf '%s-%s\n' "$code" "$word" > /app/answer.txt

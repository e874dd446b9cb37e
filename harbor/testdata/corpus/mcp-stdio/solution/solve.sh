#!/bin/bash
# Speak MCP to the vault server as a client would: initialize, then call get_secret.
out=$(printf '%s\n' \
  '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"solve","version":"1"}}}' \
  '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
  '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_secret","arguments":{}}}' \
  | /usr/local/bin/vault-mcp --vault /opt/vault)
printf '%s\n' "$out" | grep '"id":2' | sed -n 's/.*"text":"\([^"]*\)".*/\1/p' > /app/secret.txt

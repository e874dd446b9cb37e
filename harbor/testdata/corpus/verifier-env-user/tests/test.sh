#!/bin/bash
# Runs as the verifier user "checker", with EXPECTED_GREETING from [verifier].env.
mkdir -p /logs/verifier
ok=1
[ "$(id -un)" = "checker" ] || { echo "verifier runs as $(id -un), not checker" >&2; ok=0; }
[ -n "$EXPECTED_GREETING" ] || { echo "EXPECTED_GREETING is not set" >&2; ok=0; }
[ "$(cat /app/greeting.txt 2>/dev/null)" = "$EXPECTED_GREETING" ] || ok=0
echo $ok > /logs/verifier/reward.txt

#!/bin/bash
# The work is done, and the container has no way out: with allow_internet = false no name
# outside its network resolves (a container with the internet resolves deb.debian.org).
mkdir -p /logs/verifier
if [ "$(cat /app/offline.txt 2>/dev/null)" = "offline" ] && ! timeout 2 getent hosts deb.debian.org >/dev/null; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi

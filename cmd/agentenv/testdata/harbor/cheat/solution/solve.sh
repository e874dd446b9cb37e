#!/bin/bash
# A cheating "solution": it does not write /app/work.txt. It looks for the tests (which must
# not be in the container while the agent works), and writes a reward of 1 itself, in both
# files: the verifier empties /logs/verifier before the tests run.
if [ -e /tests ]; then seen="tests: present: $(ls -A /tests | tr '\n' ' ')"; else seen="tests: absent"; fi
echo "$seen" > /app/evidence.txt
echo "$seen"
mkdir -p /logs/verifier
echo 1 > /logs/verifier/reward.txt
echo '{"reward": 1}' > /logs/verifier/reward.json

#!/bin/bash
# On purpose, this test alone passes an untouched container (no file, so no draft line): only
# the gates of the steps before it keep an agent that did nothing at 0.
mkdir -p /logs/verifier
if grep -qx draft /app/notes.txt 2>/dev/null; then echo 0; else echo 1; fi > /logs/verifier/reward.txt

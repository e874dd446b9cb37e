# Shared by every step's test.sh: reward 1 when the condition passed, else 0.
reward() {
  mkdir -p /logs/verifier
  if "$@"; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
}

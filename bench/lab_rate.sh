# Sourced by the bench drivers that sweep RATES (diloco.sh, torchft.sh). lab_for_rate RATE
# brings the lab named $lab up with 2 hosts at RATE (20mbit with 5 ms one way, the slow
# link of docs/results.md; other rates without added delay), or takes it down for
# "loopback", and sets the array `flags` to what dtrain train / launch then need.
lab_for_rate() {
  "$bin" netlab down "$lab" >/dev/null 2>&1 || true
  flags=()
  [ "$1" = loopback ] && return 0
  local delay=0
  [ "$1" = 20mbit ] && delay=5ms
  "$bin" netlab up "$lab" --hosts 2 --rate "$1" --delay "$delay" >/dev/null
  flags=(--netlab "$lab")
}

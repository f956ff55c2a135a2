#!/usr/bin/env bash
# Prints a random HT_FAULTS plan of COUNT faults for a chaos run:
#   chaos_faults.sh SEED COUNT FIRST_STEP LAST_STEP RANKS NODES CKPT_EVERY
# Kinds: crash, hang, bitflip (the run needs --sdc-every), nan (a divergence;
# the run needs --divergence-steps), ckpt-corrupt (at a checkpoint step, when
# CKPT_EVERY > 0) and at most one node-unhealthy (the run needs a spare).
# Steps are distinct and at least 2 apart, so each fault is its own incident.
# The same seed gives the same plan.
set -euo pipefail
seed="$1"; count="$2"; first="$3"; last="$4"; ranks="$5"; nodes="$6"; ckpt_every="$7"
RANDOM="$seed"
kinds=(crash hang bitflip nan node-unhealthy)
[ "$ckpt_every" -gt 0 ] && kinds+=(ckpt-corrupt)
used_steps=" "
unhealthy=0
faults=()
step=0
pick_step() {  # sets $step: in [first, last], 2 away from every step used
  local s tries=0
  while :; do
    s=$(( first + RANDOM % (last - first + 1) ))
    [ "$1" = ckpt ] && s=$(( (s / ckpt_every) * ckpt_every )) && [ "$s" -lt "$first" ] && s=$(( s + ckpt_every ))
    case "$used_steps" in *" $s "*|*" $((s - 1)) "*|*" $((s + 1)) "*) ;; *) break ;; esac
    tries=$((tries + 1))
    [ "$tries" -lt 1000 ] || { echo "chaos_faults.sh: no room for $count faults in steps $first..$last" >&2; exit 2; }
  done
  used_steps+="$s "
  step="$s"
}
while [ "${#faults[@]}" -lt "$count" ]; do
  kind="${kinds[RANDOM % ${#kinds[@]}]}"
  rank=$(( RANDOM % ranks ))
  case "$kind" in
    crash|hang|bitflip) pick_step any; faults+=("$kind:rank=$rank:step=$step") ;;
    nan) pick_step any; faults+=("nan:step=$step") ;;
    ckpt-corrupt) pick_step ckpt; faults+=("ckpt-corrupt:step=$step") ;;
    node-unhealthy)
      [ "$unhealthy" = 0 ] || continue
      unhealthy=1
      faults+=("node-unhealthy:node=$(( RANDOM % nodes ))") ;;
  esac
done
(IFS=,; echo "${faults[*]}")

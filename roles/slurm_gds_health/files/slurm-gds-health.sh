#!/usr/bin/env bash
# gdsfleet: Slurm Prolog, Epilog and HealthCheckProgram over gdsfleet-attest (installed by the
# role gdsfleet.gds.slurm_gds_health; docs/operations.md "Slurm").
#
#   slurm-gds-health prolog        refuse the job on a node whose GDS regressed, drain it;
#                                  attest stores the job's counter baseline (--job-start)
#   slurm-gds-health epilog        attest keeps the job's GDS proof (--job: which path its bytes
#                                  took) in its bounded per-node log, /var/lib/gdsfleet/attest-jobs.jsonl
#   slurm-gds-health healthcheck   drain a regressed node; resume a node gdsfleet drained
#
# What attest's exit status means (docs/cli.md, "attest"): 0 nothing regressed, 1 at least one
# regression (or never verified), 70 attest's own failure. Only 1 acts on the node. Any other
# outcome (70, a timeout, attest missing, a crash of this script) is gdsfleet's own error: it is
# logged, the node is NEVER drained for it and the job runs. The prolog therefore fails (exit 1,
# the job is requeued) only on the one path below that decided so; everything else exits 0,
# which the guard at the bottom of this file enforces.
#
# Bounded in time: attest runs under `timeout` (its --deadline plus a grace, then SIGKILL), every
# scontrol call too, and the log's lock is waited for 1 s. The prolog's worst case: DEADLINE + GRACE + 2 + SCONTROL_TIMEOUT + 2 + 2 seconds (18 by default).
# Slurm runs the Prolog and Epilog with no PATH and kills a HealthCheckProgram after 60 s
# (slurm.conf(5)).
#
# Settings: /etc/gdsfleet/slurm-gds-health.conf (KEY=VALUE lines, read, never sourced;
# GDSFLEET_SLURM_HEALTH_CONF names another file).

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH LC_ALL=C
umask 022
set -o pipefail

REFUSE=100  # the logic's word for "refuse this job" (the guard maps it to exit 1)

# ------------------------------------------------------------------ settings
ATTEST=/usr/local/sbin/gdsfleet-attest
ATTEST_RECORD=
DEADLINE=5
GRACE=2
SCONTROL=/usr/bin/scontrol
SCONTROL_TIMEOUT=5
MODE=enforce
RESUME=true
TEXTFILE=
STATE_DIR=/run/gdsfleet/slurm
LOG_FILE=/var/log/gdsfleet/slurm-gds-health.log
LOG_MAX_BYTES=1048576
NODENAME=
REASON_PREFIX="gdsfleet:"

OUT_MAX=65536      # bytes of attest's output read
REASON_MAX=160     # characters of attest's first line in a drain reason
WHO=gdsfleet-slurm

_clean() {  # one line, printable ASCII only, at most $2 characters
  printf '%s' "$1" | head -n 1 | tr -cd '\040-\176' | cut -c "1-${2:-200}"
}

log() {  # log LEVEL MESSAGE: syslog (daemon facility), stderr (slurmd's log), the node's file
  local level=$1 msg line
  msg=$(_clean "$2" 400)
  line="$(date -u +%Y-%m-%dT%H:%M:%SZ) ${WHO}[$$] ${CONTEXT:-?} $level: $msg"
  logger -t "$WHO" -p "daemon.$level" -- "${CONTEXT:-?}: $msg" 2>/dev/null
  printf '%s\n' "$line" >&2
  if [ -n "$LOG_FILE" ]; then
    _append "$LOG_FILE" "$LOG_MAX_BYTES" "$line"
  fi
  return 0
}

_append() {  # _append FILE MAX_BYTES LINE [WAIT]: append under a lock waited for WAIT seconds
  local file=$1 max=$2 line=$3 wait=${4:-1} size  # (default 1); FILE.1 keeps the older lines
  mkdir -p -- "$(dirname -- "$file")" 2>/dev/null || return 1
  {
    flock -w "$wait" 9 || return 1
    size=$(stat -c %s -- "$file" 2>/dev/null || echo 0)
    if [ $((size + ${#line} + 1)) -gt "$max" ]; then
      mv -f -- "$file" "$file.1" 2>/dev/null
    fi
    printf '%s\n' "$line" >>"$file"
  } 9>>"$file.lock"
}

_number() { [[ $1 =~ ^[0-9]{1,12}$ ]]; }

read_settings() {
  local conf=${GDSFLEET_SLURM_HEALTH_CONF:-/etc/gdsfleet/slurm-gds-health.conf} key value
  [ -e "$conf" ] || return 0
  if [ ! -r "$conf" ]; then
    log warning "cannot read $conf: the defaults apply"
    return 0
  fi
  while IFS= read -r key || [ -n "$key" ]; do
    case $key in ''|'#'*) continue ;; esac
    value=${key#*=}
    key=${key%%=*}
    case $key in
      ATTEST|ATTEST_RECORD|SCONTROL|TEXTFILE|STATE_DIR|LOG_FILE|NODENAME|MODE|RESUME)
        printf -v "$key" '%s' "$value" ;;
      DEADLINE|GRACE|SCONTROL_TIMEOUT|LOG_MAX_BYTES)
        if _number "$value"; then printf -v "$key" '%s' "$value"
        else log warning "$conf: $key=$value is not a number: $key keeps ${!key}"; fi ;;
      *) log warning "$conf: unknown setting '$key' ignored" ;;
    esac
  done < <(head -c 65536 -- "$conf")
  case $MODE in enforce|observe) ;; *)
    log warning "$conf: MODE=$MODE is neither enforce nor observe: observe (nothing drained)"
    MODE=observe ;;
  esac
}

node_name() {
  if [ -n "$NODENAME" ]; then printf '%s' "$NODENAME"
  elif [ -n "${SLURMD_NODENAME:-}" ]; then printf '%s' "$SLURMD_NODENAME"
  else hostname -s; fi
}

# ------------------------------------------------------------------ attest
# run_attest ARGS...: sets ATTEST_RC, ATTEST_FIRST and ATTEST_LAST (first and last stdout line,
# cleaned), ATTEST_OUT (stdout, at most OUT_MAX bytes) and ATTEST_ERR (first stderr line,
# cleaned). The node_exporter textfile, when set, is written by every run.
run_attest() {
  local out err args=("$@")
  ATTEST_OUT="" ATTEST_FIRST="" ATTEST_LAST="" ATTEST_ERR=""
  if [ ! -x "$ATTEST" ]; then
    ATTEST_RC=127 ATTEST_ERR="$ATTEST is missing or not executable"
    return
  fi
  [ -n "$ATTEST_RECORD" ] && args+=(--record "$ATTEST_RECORD")
  [ -n "$TEXTFILE" ] && args+=(--textfile "$TEXTFILE")
  out=$(mktemp "${TMPDIR:-/tmp}/gdsfleet-attest.XXXXXX") || { ATTEST_RC=75; ATTEST_ERR="mktemp failed"; return; }
  err=$(mktemp "${TMPDIR:-/tmp}/gdsfleet-attest.XXXXXX") || { rm -f -- "$out"; ATTEST_RC=75; ATTEST_ERR="mktemp failed"; return; }
  timeout -k 2 "$((DEADLINE + GRACE))" "$ATTEST" --deadline "$DEADLINE" "${args[@]}" \
    </dev/null >"$out" 2>"$err"
  ATTEST_RC=$?
  ATTEST_OUT=$(head -c "$OUT_MAX" -- "$out")
  ATTEST_FIRST=$(_clean "$ATTEST_OUT" "$REASON_MAX")
  ATTEST_LAST=$(_clean "$(printf '%s\n' "$ATTEST_OUT" | grep -v '^[[:space:]]*$' | tail -n 1)" 200)
  ATTEST_ERR=$(_clean "$(head -c 4096 -- "$err")" 300)
  rm -f -- "$out" "$err"
}

attest_failure() {  # the words for an outcome of attest other than 0 or 1
  case $ATTEST_RC in
    124|137) printf 'gdsfleet-attest did not answer within %ss (killed)' "$((DEADLINE + GRACE))" ;;
    127) printf '%s' "$ATTEST_ERR" ;;
    *) printf 'gdsfleet-attest failed (exit %s)%s' "$ATTEST_RC" "${ATTEST_ERR:+: $ATTEST_ERR}" ;;
  esac
}

# ------------------------------------------------------------------ scontrol
scontrol_run() { timeout -k 2 "$SCONTROL_TIMEOUT" "$SCONTROL" "$@" </dev/null 2>&1 | head -c 65536; }

# node_state NODE: sets NODE_STATE (e.g. IDLE+DRAIN) and NODE_REASON (without Slurm's
# "[user@time]" suffix); returns non-zero when scontrol did not say
node_state() {
  local line
  NODE_STATE="" NODE_REASON=""
  line=$(scontrol_run -o show node "$1") || true
  [[ $line =~ (^|[[:space:]])State=([^[:space:]]+) ]] || return 1
  NODE_STATE=${BASH_REMATCH[2]}
  if [[ $line =~ [[:space:]]Reason=(.*)$ ]]; then
    NODE_REASON=${BASH_REMATCH[1]}
    NODE_REASON=${NODE_REASON% \[*@*\]}
  fi
  return 0
}

drained_by_gdsfleet() {  # NODE_STATE / NODE_REASON of node_state
  [[ $NODE_STATE == *DRAIN* && $NODE_STATE != *DOWN* && $NODE_REASON == "$REASON_PREFIX"* ]]
}

drain() {  # drain NODE: with attest's first line as the reason
  local node=$1 reason out
  reason="$REASON_PREFIX ${ATTEST_FIRST:-attest reported a regression (no detail)}"
  if out=$(scontrol_run update "nodename=$node" state=drain "reason=$reason"); then
    log warning "drained $node: $reason"
  else
    log err "could not drain $node (scontrol: $(_clean "$out" 200)); reason was: $reason"
    return 1
  fi
}

# ------------------------------------------------------------------ the three entry points
do_prolog() {
  local node job=${SLURM_JOB_ID:-} args=()
  node=$(node_name)
  if _number "$job"; then
    # the job's start, for the epilog's --since; attest stores the counters' baseline
    mkdir -p -- "$STATE_DIR" 2>/dev/null && date +%s >"$STATE_DIR/job-$job.start" 2>/dev/null
    args=(--job "$job" --job-start)
  fi
  run_attest "${args[@]}"
  case $ATTEST_RC in
    0) return 0 ;;
    1)
      if [ "$MODE" = observe ]; then
        log warning "job ${job:-?} on $node: GDS regressed ($ATTEST_FIRST); MODE=observe: not draining, the job runs"
        return 0
      fi
      drain "$node"
      log warning "job ${job:-?} refused on $node: $ATTEST_FIRST"
      printf 'gdsfleet: %s: GDS regressed since its verify: %s\n' "$node" "$ATTEST_FIRST" >&2
      return "$REFUSE" ;;
    *)
      log err "job ${job:-?} on $node: $(attest_failure); NOT draining (gdsfleet never drains a node for an error of its own): the job runs"
      return 0 ;;
  esac
}

do_epilog() {
  local job=${SLURM_JOB_ID:-} since="" stamp start args=()
  if ! _number "$job"; then
    log err "no SLURM_JOB_ID in the epilog's environment: no job proof recorded"
    return 0
  fi
  stamp="$STATE_DIR/job-$job.start"
  if [ -f "$stamp" ]; then
    since=$(head -c 32 -- "$stamp" | tr -cd '0-9')
    rm -f -- "$stamp"
  fi
  if ! _number "$since"; then  # no prolog ran (PrologFlags, a node added mid-job): ask Slurm
    start=$(scontrol_run -o show job "$job" | grep -oE 'StartTime=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}' | head -n 1)
    [ -n "$start" ] && since=$(date -d "${start#StartTime=}" +%s 2>/dev/null)
  fi
  if _number "$since"; then
    args=(--since "$since")
  else  # attest falls back on the prolog's baseline, if it stored one
    log warning "job $job: no start time (no prolog stamp, scontrol did not say): the proof's cuFile log scan starts at attest's baseline, if any"
  fi
  run_attest --job "$job" "${args[@]}"
  case $ATTEST_RC in
    0|1) log info "${ATTEST_LAST:-job $job: gdsfleet-attest printed no summary}" ;;  # "job N: <verdict>: nvfs .. MiB, p2pdma .., compat ..; why"
    *) log err "job $job: $(attest_failure); the job's GDS proof was not kept" ;;
  esac
  return 0
}

do_healthcheck() {
  local node
  node=$(node_name)
  run_attest
  case $ATTEST_RC in
    0|1) ;;
    *) log err "$node: $(attest_failure); the node's state is left as it is (neither drained nor resumed)"
       return 0 ;;
  esac
  if ! node_state "$node"; then
    log err "$node: scontrol did not say the node's state; nothing changed"
    return 0
  fi
  if [ "$ATTEST_RC" = 1 ]; then
    if [[ $NODE_STATE == *DRAIN* || $NODE_STATE == *DOWN* ]]; then
      return 0  # already out of service: gdsfleet's reason or an operator's stays
    fi
    if [ "$MODE" = observe ]; then
      log warning "$node: GDS regressed ($ATTEST_FIRST); MODE=observe: not draining"
      return 0
    fi
    drain "$node"
    return 0
  fi
  if drained_by_gdsfleet && [ "$RESUME" = true ] && [ "$MODE" = enforce ]; then
    local out
    if out=$(scontrol_run update "nodename=$node" state=resume); then
      log notice "resumed $node: GDS is as verified again (was: $NODE_REASON)"
    else
      log err "could not resume $node (scontrol: $(_clean "$out" 200))"
    fi
  fi
  return 0
}

main() {
  case $CONTEXT in
    prolog) do_prolog ;;
    epilog) do_epilog ;;
    healthcheck) do_healthcheck ;;
    *) log err "usage: slurm-gds-health prolog|epilog|healthcheck (not '$CONTEXT')"; return 64 ;;
  esac
}

# ------------------------------------------------------------------ the guard
# The logic runs in a subshell: whatever happens there (an error, a signal, a bug), only its
# explicit REFUSE makes the prolog fail. A Slurm Prolog or Epilog that exits non-zero drains the
# node (slurm.conf(5)), so every other outcome exits 0.
CONTEXT=${1:-}
read_settings  # here, so that the guard's own log line goes where the settings say
(main)
rc=$?
if [ "$rc" = "$REFUSE" ] && [ "$CONTEXT" = prolog ]; then
  exit 1
fi
if [ "$rc" != 0 ]; then
  log err "internal error (exit $rc); NOT draining (an error of gdsfleet's own never drains a node)"
fi
exit 0

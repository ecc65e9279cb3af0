#!/usr/bin/env bash
# TEST HARNESS: serves the stand-in package repository (.lab/standin-repo, built by build.sh) on
# http://127.0.0.1:${GDSFLEET_REPO_PORT:-8470}/ with Python's http.server (loopback only), for
# the operator's lab (python -m tests.harness.lab up, scripts/lab.sh). Test runs do not use
# this script: each serves the repository on a port of its own (tests/harness/run.py).
#   serve.sh            run in the foreground
#   serve.sh start      start in the background (pid in .lab/standin-repo-server.pid); no-op
#                       when this checkout's server already serves the port; refuses (exit 1)
#                       when a server it did not start answers there (another checkout's lab
#                       signs its repository with another key: apt would fail with NO_PUBKEY)
#   serve.sh stop       stop the server this script started (by its pid file)
#   serve.sh status     exit 0 when a repository answers on the port (whoever serves it)
#   serve.sh ours       exit 0 when the server this script started answers on the port
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
lab=${GDSFLEET_LAB_DIR:-$root/.lab}
port=${GDSFLEET_REPO_PORT:-8470}
[[ "$port" =~ ^[0-9]+$ ]] || { echo "GDSFLEET_REPO_PORT=$port is not a port number: set it to a free TCP port, e.g. 8471" >&2; exit 64; }
pidfile=$lab/standin-repo-server.pid
probe="http://127.0.0.1:$port/cuda/repos/debian12/x86_64/InRelease"

answers() { python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$probe" >/dev/null 2>&1; }
# The pid file names a live http.server of this checkout's repository (on this port: "mine").
served_by_pidfile() {  # $1: the port, or "*"
  [ -f "$pidfile" ] || return 1
  local pid; pid=$(cat "$pidfile")
  [[ "$pid" =~ ^[0-9]+$ ]] && [ -r "/proc/$pid/cmdline" ] || return 1
  local cmd; cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline")  # the final NUL becomes a space
  # shellcheck disable=SC2053  # $1 is a pattern on purpose ("*": any port)
  [[ "$cmd" == *http.server*" $lab/standin-repo "$1" "* ]]
}
mine() { served_by_pidfile "$port"; }

case "${1:-foreground}" in
  foreground)
    exec python3 -m http.server --bind 127.0.0.1 --directory "$lab/standin-repo" "$port" ;;
  start)
    mkdir -p "$lab"
    exec 9>"$lab/standin-repo-server.lock"
    flock 9
    if mine && answers; then echo "stand-in repo already served on 127.0.0.1:$port (pid $(cat "$pidfile"))"; exit 0; fi
    if answers; then
      echo "a server this checkout did not start answers on 127.0.0.1:$port (another checkout's lab?); stop it, or set GDSFLEET_REPO_PORT to a free port" >&2
      exit 1
    fi
    [ -d "$lab/standin-repo" ] || { echo "no $lab/standin-repo: run build.sh first" >&2; exit 1; }
    nohup python3 -m http.server --bind 127.0.0.1 --directory "$lab/standin-repo" "$port" \
      >"$lab/standin-repo-server.log" 2>&1 </dev/null &
    echo $! > "$pidfile"
    for _ in $(seq 1 50); do
      if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then break; fi  # could not bind the port
      answers && { echo "serving $lab/standin-repo on 127.0.0.1:$port (pid $(cat "$pidfile"))"; exit 0; }
      sleep 0.1
    done
    echo "stand-in repo server did not come up on 127.0.0.1:$port; see $lab/standin-repo-server.log" >&2; exit 1 ;;
  stop)
    if served_by_pidfile "*"; then kill "$(cat "$pidfile")"; fi
    rm -f "$pidfile" ;;
  status)
    answers ;;
  ours)
    mine && answers ;;
  *) echo "usage: $0 [start|stop|status|ours]" >&2; exit 64 ;;
esac

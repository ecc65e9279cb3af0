#!/usr/bin/env bash
# TEST HARNESS: serves the stand-in package repository (.lab/standin-repo, built by build.sh) on
# http://127.0.0.1:${GDSFLEET_REPO_PORT:-8470}/ with Python's http.server (loopback only).
#   serve.sh            run in the foreground
#   serve.sh start      start in the background (pid in .lab/standin-repo-server.pid); no-op
#                       when the repository already answers on the port
#   serve.sh stop       stop the server this script started (by its pid file)
#   serve.sh status     exit 0 when the repository answers on the port
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
lab=${GDSFLEET_LAB_DIR:-$root/.lab}
port=${GDSFLEET_REPO_PORT:-8470}
pidfile=$lab/standin-repo-server.pid
probe="http://127.0.0.1:$port/cuda/repos/debian12/x86_64/InRelease"

answers() { python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$probe" >/dev/null 2>&1; }

case "${1:-foreground}" in
  foreground)
    exec python3 -m http.server --bind 127.0.0.1 --directory "$lab/standin-repo" "$port" ;;
  start)
    mkdir -p "$lab"
    exec 9>"$lab/standin-repo-server.lock"
    flock 9
    if answers; then echo "stand-in repo already served on 127.0.0.1:$port"; exit 0; fi
    [ -d "$lab/standin-repo" ] || { echo "no $lab/standin-repo: run build.sh first" >&2; exit 1; }
    nohup python3 -m http.server --bind 127.0.0.1 --directory "$lab/standin-repo" "$port" \
      >"$lab/standin-repo-server.log" 2>&1 </dev/null &
    echo $! > "$pidfile"
    for _ in $(seq 1 50); do answers && { echo "serving $lab/standin-repo on 127.0.0.1:$port (pid $(cat "$pidfile"))"; exit 0; }; sleep 0.1; done
    echo "stand-in repo server did not come up; see $lab/standin-repo-server.log" >&2; exit 1 ;;
  stop)
    if [ -f "$pidfile" ]; then
      pid=$(cat "$pidfile")
      if kill -0 "$pid" 2>/dev/null && grep -q http.server "/proc/$pid/cmdline" 2>/dev/null; then kill "$pid"; fi
      rm -f "$pidfile"
    fi ;;
  status)
    answers ;;
  *) echo "usage: $0 [start|stop|status]" >&2; exit 64 ;;
esac

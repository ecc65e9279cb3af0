#!/usr/bin/env bash
# Captures raw outputs on a REAL GPU node for the project's parser fixtures (the lent H100:
# Ubuntu 24.04, provider kernel, open driver 580, CUDA 13.0, libcufile 1.15, no nvidia-fs).
# Reads only, apart from test files under a scratch directory it removes. Everything lands in
# $OUT/capture/ (default /tmp/gdsfleet-capture) and in $OUT/capture.tgz.
#
# Needs the wheels kvikio-cu13, libkvikio-cu13 and rapids-logger in .whl/ (git-ignored; see
# docs/evidence/README.md for the download command).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdsfleet-capture}
cap=$OUT/capture
mkdir -p "$cap"
if ! python3 -c 'import kvikio' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/kvikio*.whl .whl/libkvikio*.whl .whl/rapids_logger*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

run() {  # name command...: stdout+stderr and the exit code into $cap/<name>.txt
  local name=$1; shift
  { "$@"; echo "[exit $?]"; } > "$cap/$name.txt" 2>&1
}
kernel=$(uname -r)
run uname uname -a
run os_release cat /etc/os-release
run proc_driver_nvidia_params cat /proc/driver/nvidia/params
run proc_driver_nvidia_version cat /proc/driver/nvidia/version
run modinfo_nvidia modinfo nvidia
run modinfo_nvidia_fs modinfo nvidia_fs
run lib_modules ls -la /lib/modules "/lib/modules/$kernel"
run usr_src ls -la /usr/src
run boot ls -la /boot
run nvme_core_multipath cat /sys/module/nvme_core/parameters/multipath
run sys_module_nvidia_parameters sh -c 'for f in /sys/module/nvidia/parameters/*; do printf "%s: " "${f##*/}"; cat "$f" 2>&1; done'
run modprobe_d sh -c 'grep -rH . /etc/modprobe.d/ 2>&1 | grep -v "^#"'
run dpkg_query sh -c 'dpkg-query -W -f="\${Package} \${Version} \${Status}\n" python3-apt python3-venv dkms "linux-headers-$(uname -r)" "linux-image-$(uname -r)" 2>&1'
run apt_cache_policy_headers sh -c 'apt-cache policy "linux-headers-$(uname -r)"; apt-cache show "linux-headers-$(uname -r)" | head -n 5'
run apt_sources sh -c 'ls -la /etc/apt/sources.list.d/; cat /etc/apt/sources.list 2>/dev/null | grep -v "^#" | head'
run python_venv sh -c 'python3 --version; python3 -m venv /tmp/gdsfleet-venv-probe && /tmp/gdsfleet-venv-probe/bin/python -m pip --version; rm -rf /tmp/gdsfleet-venv-probe'
run dkms_status dkms status
run cuda_gds_dir ls -la /usr/local/cuda/gds /usr/local/cuda/gds/tools
cp /usr/local/cuda/gds/cufile.json "$cap/usr_local_cuda_gds_cufile.json" 2>/dev/null
cp /etc/cufile.json "$cap/etc_cufile.json" 2>/dev/null
run ldconfig_cufile sh -c 'ldconfig -p | grep -i cufile; ls -la /usr/local/cuda/targets/x86_64-linux/lib/ | grep -i cufile'
run pip_show python3 -m pip show nvidia-cufile cupy-cuda13x

# cuFile's own account of the path it took: a test-scoped cufile.json (CUFILE_ENV_PATH_JSON)
# with logging and cufile_stats on, one kvikio write+read per variant.
scratch=/var/tmp/gdsfleet-capture-io
mkdir -p "$scratch"
python3 - "$cap" "$scratch" <<'PY' > "$cap/kvikio_runs.txt" 2>&1
import json, os, re, subprocess, sys
cap, scratch = sys.argv[1], sys.argv[2]
src = "/etc/cufile.json" if os.path.exists("/etc/cufile.json") else "/usr/local/cuda/gds/cufile.json"
text = open(src).read()
# strip // comments outside strings, then trailing commas (the vendor file has both)
out, i, s = [], 0, False
while i < len(text):
    c = text[i]
    if s:
        out.append(c)
        if c == "\\": out.append(text[i+1]); i += 1
        elif c == '"': s = False
    elif c == '"': s = True; out.append(c)
    elif text.startswith("//", i):
        while i < len(text) and text[i] != "\n": i += 1
        continue
    else: out.append(c)
    i += 1
base = json.loads(re.sub(r",(\s*[}\]])", r"\1", "".join(out)))
child = r'''
import os, sys, json
import cupy, kvikio, kvikio.defaults as d, kvikio.cufile_driver as drv
size = int(sys.argv[1]); path = sys.argv[2]
info = {"KVIKIO_COMPAT_MODE": os.environ.get("KVIKIO_COMPAT_MODE"),
        "KVIKIO_GDS_THRESHOLD": os.environ.get("KVIKIO_GDS_THRESHOLD"), "size": size}
for name in ("gds_threshold", "compat_mode", "task_size", "thread_pool_nthreads"):
    try: info["defaults." + name] = str(d.get(name))
    except Exception as e: info["defaults." + name] = "error: %r" % (e,)
try: info["is_gds_available"] = bool(drv.properties.is_gds_available)
except Exception as e: info["is_gds_available"] = repr(e)
data = cupy.arange(size, dtype=cupy.uint8)
try:
    f = kvikio.CuFile(path, "w"); n = f.write(data); f.close()
    buf = cupy.empty_like(data); f = kvikio.CuFile(path, "r"); m = f.read(buf); f.close()
    info.update(ok=True, written=int(n), read=int(m), equal=bool((buf == data).all()))
except Exception as e:
    info.update(ok=False, error="%s: %s" % (type(e).__name__, e))
print(json.dumps(info))
'''
variants = [
    # name, allow_compat_mode in the json, KVIKIO_COMPAT_MODE, size, log level
    ("off_nocompat_trace", False, "OFF", 16 << 20, "TRACE"),
    ("off_allowcompat_info", True, "OFF", 16 << 20, "INFO"),
    ("off_allowcompat_trace_small", True, "OFF", 64 << 10, "TRACE"),
    ("on_trace", True, "ON", 16 << 20, "TRACE"),
]
for name, allow, mode, size, level in variants:
    logdir = os.path.join(scratch, name)
    os.makedirs(logdir, exist_ok=True)
    cfg = json.loads(json.dumps(base))
    cfg.setdefault("logging", {}).update({"dir": logdir, "level": level})
    cfg.setdefault("profile", {})["cufile_stats"] = 3
    cfg.setdefault("properties", {})["allow_compat_mode"] = allow
    cfgpath = os.path.join(logdir, "cufile.json")
    json.dump(cfg, open(cfgpath, "w"), indent=1)
    env = dict(os.environ, CUFILE_ENV_PATH_JSON=cfgpath, KVIKIO_COMPAT_MODE=mode)
    p = subprocess.run([sys.executable, "-c", child, str(size), os.path.join(scratch, name + ".bin")],
                       env=env, capture_output=True, text=True, timeout=300, cwd=logdir)
    print("==", name, "rc", p.returncode)
    print(p.stdout.strip()); print(p.stderr.strip()[-3000:])
    for f in sorted(os.listdir(logdir)):
        full = os.path.join(logdir, f)
        if f.endswith(".log") or "cufile" in f.lower() and f != "cufile.json":
            dest = os.path.join(cap, "cufile_%s_%s" % (name, f))
            open(dest, "w").write(open(full, errors="replace").read()[-400000:])
            print("  log:", f, os.path.getsize(full), "bytes")
PY
rm -rf "$scratch"
tar -C "$OUT" -czf "$OUT/capture.tgz" capture
ls -la "$cap"
cat "$cap/kvikio_runs.txt"

#!/usr/bin/env bash
# TEST HARNESS: builds the stand-in package repository into .lab/standin-repo (see
# docs/testing.md): stand-in .debs with the real NVIDIA/Mellanox names and versions
# (build_debs.py), flat APT repositories indexed with apt-ftparchive and signed with a
# throw-away GPG key (generated into .lab/standin-repo-gnupg), the repository keys at NVIDIA's
# and Mellanox's paths, and a stand-in MLNX_OFED tarball. Layout (served by serve.sh):
#   cuda/repos/debian12/x86_64/        flat repo + 3bf863cc.pub (+ cuda-keyring_1.1-1_all.deb)
#   doca/3.1.0/debian12/x86_64/        flat repo;  doca/GPG-KEY-Mellanox.pub
#   mlnx_ofed/MLNX_OFED_LINUX-23.10-2.1.3.1-debian12.1-x86_64.tgz
#   pypi/simple/                       PEP 503 index: stand-in kvikio-cu12/13, cupy-cuda12x/13x
#                                      wheels (tests/harness/standin_wheels/build_wheels.py)
#   debian/bookworm/                   flat repo standing in for the nodes' distribution
#                                      archive: the REAL Debian 12 python3-venv packages
#                                      (apt-get download), plus the stand-in dkms and the
#                                      running kernel's headers, signed with a throw-away key;
#                                      debian/archive-key.asc
# Cached: skips the build when its inputs (these scripts, payload/, kernel) are unchanged. The
# repository does not depend on the port it is served on (test runs serve it on a port of their
# own, tests/harness/run.py): cuda-keyring's sources list names the lab's default port 8470,
# as the real package names NVIDIA's fixed URL (no test installs cuda-keyring).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
lab=${GDSFLEET_LAB_DIR:-$root/.lab}
out=$lab/standin-repo
keyring_port=8470
kernel=${GDSFLEET_SIM_KERNEL:-$(uname -r)}
export GNUPGHOME=$lab/standin-repo-gnupg
# Signing starts a gpg-agent for this key home: stop it when the build ends, whatever the
# outcome (lab teardown stops it too, tests.harness.lab.stop_repo_gpg_agent; issue 30 item 9).
# --no-auto-check-trustdb: no "gpg: checking the trustdb" lines (these keys sign, nobody
# verifies with this keyring).
stop_agent() { gpgconf --kill gpg-agent >/dev/null 2>&1 || true; }
trap stop_agent EXIT
gpg() { command gpg --no-auto-check-trustdb "$@"; }
mkdir -p "$lab"

exec 9>"$lab/standin-repo.lock"
flock 9

wheels=$root/tests/harness/standin_wheels
# The real Debian packages `python3 -m venv` needs on a node, at the versions of the bookworm
# suite the node image is debootstrapped from (not bookworm-security: python3.11-venv must equal
# the node's python3.11).
venv_debs="python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl python3-distutils python3-lib2to3"
suite_version() { apt-cache madison "$1" | awk -F'|' '$3 ~ / bookworm\/main / {gsub(/ /, "", $2); print $2; exit}'; }
deb_pins=""
for p in $venv_debs; do v=$(suite_version "$p"); [ -n "$v" ] || v=$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}'); deb_pins="$deb_pins $p=$v"; done
inputs=$( (cat "$0" "$here/build_debs.py"; find "$here/payload" "$wheels" -type f -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 cat; cat "$root/roles/verify_runtime/defaults/main.yml"; echo "$kernel $deb_pins") | sha256sum | cut -c1-16)
if [ -f "$out/.inputs" ] && [ "$(cat "$out/.inputs")" = "$inputs" ] && [ -f "$GNUPGHOME/.keys-ok" ] \
   && [ -f "$out/cuda/repos/debian12/x86_64/InRelease" ]; then
  echo "stand-in repo $out is current ($inputs)"
  exit 0
fi

# Throw-away signing keys (one per vendor repository, like the real ones).
if [ ! -f "$GNUPGHOME/.keys-ok" ]; then
  rm -rf "$GNUPGHOME"; mkdir -p -m 700 "$GNUPGHOME"
  for who in cuda doca; do
    gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
      --quick-gen-key "gdsfleet stand-in $who repository key (TEST ONLY) <$who@gdsfleet.invalid>" ed25519 sign 1y
  done
  touch "$GNUPGHOME/.keys-ok"
fi
if ! gpg --batch --list-keys debian@gdsfleet.invalid >/dev/null 2>&1; then
  gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
    --quick-gen-key "gdsfleet stand-in distribution archive key (TEST ONLY) <debian@gdsfleet.invalid>" ed25519 sign 1y
fi
fpr() { gpg --batch --with-colons --list-keys "$1@gdsfleet.invalid" | awk -F: '$1=="fpr"{print $10; exit}'; }
cuda_key=$(fpr cuda); doca_key=$(fpr doca); debian_key=$(fpr debian)

new=$(mktemp -d "$lab/standin-repo.new.XXXXXX")
trap 'rm -rf "$new"; stop_agent' EXIT
cuda_dir=$new/cuda/repos/debian12/x86_64
doca_dir=$new/doca/3.1.0/debian12/x86_64
mkdir -p "$cuda_dir" "$doca_dir"
gpg --batch --armor --export "$cuda_key" > "$cuda_dir/3bf863cc.pub"
gpg --batch --armor --export "$doca_key" > "$new/doca/GPG-KEY-Mellanox.pub"
gpg --batch --export "$cuda_key" > "$new/.cuda-archive-keyring.gpg"

python3 "$here/build_debs.py" "$new" "$kernel" "$new/.cuda-archive-keyring.gpg" \
  "http://127.0.0.1:$keyring_port/cuda/repos/debian12/x86_64/"
rm -f "$new/.cuda-archive-keyring.gpg"

# Stand-in package index (PEP 503) with the stand-in kvikio/cupy wheels.
python3 "$wheels/build_wheels.py" "$new/pypi" >/dev/null

# Stand-in distribution archive: real Debian packages, downloaded once into a cache.
debian_dir=$new/debian/bookworm
debcache=$lab/debian-debs-cache
mkdir -p "$debian_dir" "$debcache"
for pin in $deb_pins; do
  p=${pin%%=*}; v=${pin#*=}
  f=$(ls "$debcache/${p}_${v//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
  if [ -z "$f" ]; then (cd "$debcache" && apt-get download -qq -o APT::Sandbox::User=root "$pin" >/dev/null); fi
  cp "$debcache/${p}_${v//:/%3a}_"*.deb "$debian_dir/"
done
# ... and what a Debian node's archive also offers for the node's kernel: dkms (Debian's main;
# DOCA's mlnx-*-dkms packages depend on it) and the running kernel's headers with their
# linux-headers-amd64 meta package (dkms recommends it), as the same stand-in packages the CUDA
# folder carries. So the roles install them through apt from the node's distribution source,
# as on a real node, and the lab needs no harness step that installs them first.
for f in "dkms_" "linux-headers-${kernel}_" "linux-headers-amd64_"; do
  cp "$cuda_dir/$f"*.deb "$debian_dir/"
done
gpg --batch --armor --export "$debian_key" > "$new/debian/archive-key.asc"

index() {  # dir key origin label
  local dir=$1 key=$2
  (cd "$dir"
   apt-ftparchive packages . > Packages
   gzip -9nc Packages > Packages.gz
   apt-ftparchive -o "APT::FTPArchive::Release::Origin=$3" -o "APT::FTPArchive::Release::Label=$4" \
     -o APT::FTPArchive::Release::Suite=stable -o APT::FTPArchive::Release::Codename=stable \
     -o APT::FTPArchive::Release::Architectures="amd64 all" release . > Release.tmp
   mv Release.tmp Release
   gpg --batch --yes --local-user "$key" --clearsign -o InRelease Release
   gpg --batch --yes --local-user "$key" -abs -o Release.gpg Release)
}
index "$cuda_dir" "$cuda_key" "NVIDIA (gdsfleet stand-in)" "NVIDIA CUDA (gdsfleet stand-in)"
index "$doca_dir" "$doca_key" "Mellanox (gdsfleet stand-in)" "DOCA (gdsfleet stand-in)"
index "$debian_dir" "$debian_key" "Debian (gdsfleet stand-in archive)" "Debian 12 packages (gdsfleet stand-in archive)"
echo "$inputs" > "$new/.inputs"
chmod -R a+rX "$new"

rm -rf "$out.old"
[ -d "$out" ] && mv "$out" "$out.old"
mv "$new" "$out"
rm -rf "$out.old"
trap - EXIT
echo "built stand-in repo $out ($inputs): $(ls "$out/cuda/repos/debian12/x86_64"/*.deb | wc -l) CUDA, $(ls "$out/doca/3.1.0/debian12/x86_64"/*.deb | wc -l) DOCA, $(ls "$out/debian/bookworm"/*.deb | wc -l) Debian packages, $(ls "$out"/pypi/simple/*/*.whl | wc -l) wheels"

#!/usr/bin/env bash
# TEST HARNESS: builds the stand-in package repository into .lab/standin-repo (see
# docs/testing.md): stand-in .debs with the real NVIDIA/Mellanox names and versions
# (build_debs.py), flat APT repositories indexed with apt-ftparchive and signed with a
# throw-away GPG key (generated into .lab/standin-repo-gnupg), the repository keys at NVIDIA's
# and Mellanox's paths, and a stand-in MLNX_OFED tarball. Layout (served by serve.sh):
#   cuda/repos/debian12/x86_64/        flat repo + 3bf863cc.pub (+ cuda-keyring_1.1-1_all.deb)
#   doca/3.1.0/debian12/x86_64/        flat repo;  doca/GPG-KEY-Mellanox.pub
#   mlnx_ofed/MLNX_OFED_LINUX-23.10-2.1.3.1-debian12.1-x86_64.tgz
# Cached: skips the build when its inputs (these scripts, payload/, kernel, port) are unchanged.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
lab=${GDSFLEET_LAB_DIR:-$root/.lab}
out=$lab/standin-repo
port=${GDSFLEET_REPO_PORT:-8470}
kernel=${GDSFLEET_SIM_KERNEL:-$(uname -r)}
export GNUPGHOME=$lab/standin-repo-gnupg
mkdir -p "$lab"

exec 9>"$lab/standin-repo.lock"
flock 9

inputs=$( (cat "$0" "$here/build_debs.py"; find "$here/payload" -type f -print0 | sort -z | xargs -0 cat; echo "$kernel $port") | sha256sum | cut -c1-16)
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
fpr() { gpg --batch --with-colons --list-keys "$1@gdsfleet.invalid" | awk -F: '$1=="fpr"{print $10; exit}'; }
cuda_key=$(fpr cuda); doca_key=$(fpr doca)

new=$(mktemp -d "$lab/standin-repo.new.XXXXXX")
trap 'rm -rf "$new"' EXIT
cuda_dir=$new/cuda/repos/debian12/x86_64
doca_dir=$new/doca/3.1.0/debian12/x86_64
mkdir -p "$cuda_dir" "$doca_dir"
gpg --batch --armor --export "$cuda_key" > "$cuda_dir/3bf863cc.pub"
gpg --batch --armor --export "$doca_key" > "$new/doca/GPG-KEY-Mellanox.pub"
gpg --batch --export "$cuda_key" > "$new/.cuda-archive-keyring.gpg"

python3 "$here/build_debs.py" "$new" "$kernel" "$new/.cuda-archive-keyring.gpg" \
  "http://127.0.0.1:$port/cuda/repos/debian12/x86_64/"
rm -f "$new/.cuda-archive-keyring.gpg"

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
echo "$inputs" > "$new/.inputs"
chmod -R a+rX "$new"

rm -rf "$out.old"
[ -d "$out" ] && mv "$out" "$out.old"
mv "$new" "$out"
rm -rf "$out.old"
trap - EXIT
echo "built stand-in repo $out ($inputs): $(ls "$out/cuda/repos/debian12/x86_64"/*.deb | wc -l) CUDA, $(ls "$out/doca/3.1.0/debian12/x86_64"/*.deb | wc -l) DOCA packages"

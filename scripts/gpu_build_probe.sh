#!/usr/bin/env bash
# Read-only: what a node offers for building the nvfs route's DKMS modules (kernel headers in
# /lib/modules or a repository, the GPU driver's sources, python3-apt for check mode, /boot).
# Run on the lent GPU machine; its output is docs/evidence/h100/build-prerequisites.txt.
set +e
k=$(uname -r)
echo "== uname -r: $k"; head -3 /etc/os-release
echo "== /var/lib/apt/lists"; ls /var/lib/apt/lists | head -20; ls /var/lib/apt/lists | wc -l
echo "== sources"; ls /etc/apt/sources.list.d/
echo "== apt-cache policy linux-headers-$k"; apt-cache policy "linux-headers-$k"; echo "rc=$?"
echo "== apt-cache show linux-headers-$k"; apt-cache show "linux-headers-$k" 2>&1 | head -5; echo "rc=${PIPESTATUS[0]}"
echo "== apt-cache policy linux-headers-generic"; apt-cache policy linux-headers-generic
echo "== /lib/modules"; ls -la /lib/modules 2>&1
echo "== /boot"; ls -la /boot 2>&1; ls /boot/grub 2>&1 | head
echo "== /usr/src"; ls -la /usr/src 2>&1
echo "== python3-apt"; python3 -c 'import apt; print(apt.__file__)'; echo "rc=$?"; dpkg -l python3-apt 2>&1 | tail -2
echo "== modinfo nvidia"; modinfo -F version nvidia; echo "rc=$?"
echo "== /sys/module/nvidia/version"; cat /sys/module/nvidia/version
echo "== /proc/driver/nvidia/version"; cat /proc/driver/nvidia/version
echo "== dkms, grubby, update-grub"; command -v dkms grubby update-grub; echo "rc=$?"

#!/usr/bin/env bash
# Reads, on a REAL GPU node (the lent H100: Ubuntu 24.04, provider kernel), what issue 28 items 5
# and 8 rest on, and judges it with the rules verify and verify.yml share
# (plugins/module_utils/nvfs_symbols.py): which P2PDMA and nvme registration symbols
# /proc/kallsyms lists, whether the kernel was built with CONFIG_PCI_P2PDMA and
# CONFIG_KALLSYMS_ALL, and what the shared rules conclude. Reads only; prints to stdout and to
# $OUT/kallsyms-p2pdma.txt (default /tmp/gdsfleet-capture). Run as root (kallsyms names are
# listed for anyone, addresses only for root; only the names matter here).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdsfleet-capture}
mkdir -p "$OUT"
{
  kernel=$(uname -r)
  echo "== kernel $kernel"
  echo "== kernel config (PCI_P2PDMA, KALLSYMS_ALL)"
  if [ -r "/boot/config-$kernel" ]; then cfg=(cat "/boot/config-$kernel")
  elif [ -r /proc/config.gz ]; then cfg=(zcat /proc/config.gz)
  else cfg=(echo "(no kernel config: neither /boot/config-$kernel nor /proc/config.gz)"); fi
  "${cfg[@]}" | grep -E '^(# )?CONFIG_(PCI_P2PDMA|KALLSYMS_ALL)[= ]|^\(no kernel' || echo "(no match)"
  echo "== /proc/kallsyms: the symbols the rules read"
  grep -w -E -e 'nvme_v[12]_register_nvfs_dma_ops|nvme_rdma_v1_register_nvfs_dma_ops' \
    -e 'nvfs_blk_rq_dma_map_iter_start' -e 'p2pdma_pgmap_ops|pci_p2pdma_add_resource' \
    /proc/kallsyms | awk '{print $2, $3, $4}' || echo "(none)"
  echo "== nvidia_fs: $(cat /sys/module/nvidia_fs/version 2>/dev/null || echo 'not loaded')"
  echo "== the shared rules' verdict"
  grep -w -E -e 'nvme_v[12]_register_nvfs_dma_ops|nvme_rdma_v1_register_nvfs_dma_ops' \
    -e 'nvfs_blk_rq_dma_map_iter_start' -e 'p2pdma_pgmap_ops|pci_p2pdma_add_resource' \
    /proc/kallsyms | python3 -c '
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("r", "plugins/module_utils/nvfs_symbols.py")
r = importlib.util.module_from_spec(spec); spec.loader.exec_module(r)
table = r.kallsyms_modules(sys.stdin.read())
try:
    version = open("/sys/module/nvidia_fs/version").read().strip()
except OSError:
    version = None
release = sys.argv[1]
print(json.dumps({"p2pdma_symbol": r.p2pdma_symbol(table),
                  "nvfs_lookup": r.lookup(table, version, release),
                  "registration": r.registration(table, version, release)}, indent=1))
' "$kernel"
} 2>&1 | tee "$OUT/kallsyms-p2pdma.txt"

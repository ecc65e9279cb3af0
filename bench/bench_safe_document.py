"""Masking benchmark (not a test): what ``safe_document`` costs before every report writer.

A verify report of N nodes, each a copy of the real H100 node record
(``docs/evidence/h100-reports/verify-gdsio.json``) under its own name, with one secret
registered (so the masking runs, as it does whenever an extra variable or a ledger URL holds
a secret). Prints the best and the median of ``--repeat`` runs of
:func:`provisioner.reports.files.safe_document`. Fails loudly (no figure) when the secret,
placed in one node's error text, is still in the result.

    .venv/bin/python bench/bench_safe_document.py --nodes 64 --repeat 15
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner import redact  # noqa: E402 - after the path
from provisioner.reports.files import safe_document  # noqa: E402

SECRET = "s3cr3t-canary-value"  # noqa: S105 - a benchmark canary, not a credential


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    doc = json.loads((REPO / "docs/evidence/h100-reports/verify-gdsio.json").read_text())
    node = doc["nodes"][0]
    doc["nodes"] = [dict(copy.deepcopy(node), name=f"gpu-{i:03d}") for i in range(args.nodes)]
    doc["nodes"][0]["error"] = f"driver said {SECRET}"
    redact.forget_all()
    redact.register(SECRET)
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        out = safe_document(doc)
        times.append(time.perf_counter() - t)
    if SECRET in json.dumps(out):
        print("FAILED: the secret is still in the masked document", file=sys.stderr)
        return 1
    print(f"safe_document, {args.nodes} nodes: best {min(times) * 1000:.1f} ms, "
          f"median {statistics.median(times) * 1000:.1f} ms ({args.repeat} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

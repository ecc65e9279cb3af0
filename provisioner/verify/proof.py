"""Does the I/O test's proof agree with the facts gathered in the same verification? (pure)

The I/O test's document and the gather are two accounts the node gives of itself in one
verification. A proof of the direct path (``io_test.evidence.proof``, one of
:data:`provisioner.verify.model.PROOF_KINDS`) counts only when the gather agrees that the path
it claims can exist on that node:

* any proof: the gather saw an NVIDIA GPU (driver loaded, or a GPU listed);
* ``nvfs_counters``: nvidia-fs is loaded (its counters cannot move without it);
* ``cufile_log`` with P2PDMA markers: the P2PDMA prerequisites (the kernel's
  ``p2pdma_pgmap_ops`` or ``pci_p2pdma_add_resource``, cufile.json
  ``properties.use_pci_p2pdma`` true and ``block.nvme.use_pci_p2pdma`` not false:
  :func:`provisioner.verify.checks.route_evidence`);
* ``cufile_log`` with nvidia-fs markers: nvidia-fs is loaded;
* ``cufile_stats`` (WekaFS, Storage Scale): nvidia-fs is loaded (their GDS client needs it:
  provisioner/verify/netfs.py).

This is the one place the rule lives: ``verify`` applies it to every node (io.direct_path and
compliance, :func:`provisioner.verify.checks.evaluate`), and ``export``/``status`` apply it
again to what the ledger holds, so a record written before the rule existed is judged alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provisioner.verify.checks.evidence import route_evidence
from provisioner.verify.model import (
    PATH_DIRECT,
    PROOF_CUFILE_LOG,
    PROOF_CUFILE_STATS,
    PROOF_KINDS,
    PROOF_NVFS_COUNTERS,
    IoTestResult,
)


def _gpu_seen(facts: Mapping[str, Any]) -> bool:
    gpu = facts.get("gpu") or {}
    return bool(gpu.get("driver_loaded") or gpu.get("count"))


def _nvfs_loaded(facts: Mapping[str, Any]) -> bool:
    return bool((facts.get("nvfs") or {}).get("loaded"))


def disagreement(io: IoTestResult, facts: Mapping[str, Any]) -> str | None:
    """Why the I/O test's proof contradicts the gathered facts; None when it agrees or when
    the test proved nothing (then there is nothing to contradict)."""
    if not io.direct_proven:
        return None
    proof = io.evidence.get("proof")
    why: list[str] = []
    if not _gpu_seen(facts):
        why.append("the gather saw no NVIDIA GPU (driver not loaded, no GPU listed)")
    if proof == PROOF_NVFS_COUNTERS and not _nvfs_loaded(facts):
        why.append("nvidia-fs counters moved but the gather found nvidia-fs not loaded")
    if proof == PROOF_CUFILE_STATS and not _nvfs_loaded(facts):
        why.append("cuFile's statistics show direct I/O but the gather found nvidia-fs not "
                   "loaded")
    if proof == PROOF_CUFILE_LOG:
        log = io.evidence.get("cufile_log") or {}
        mode = log.get("mode") if isinstance(log, Mapping) else None
        if mode == "p2pdma" and not route_evidence(dict(facts))["p2pdma"]:
            why.append("cuFile's log shows P2PDMA I/O but the gather found the P2PDMA "
                       "prerequisites missing (kernel P2PDMA symbols, cufile.json "
                       "properties.use_pci_p2pdma)")
        elif mode != "p2pdma" and not _nvfs_loaded(facts):
            why.append(f"cuFile's log shows {mode or 'direct'} I/O but the gather found "
                       "nvidia-fs not loaded")
    if not why:
        return None
    return (f"the I/O test's proof ({proof}) contradicts the facts gathered in the same "
            f"verification: " + "; ".join(why))


def counts(io: IoTestResult, facts: Mapping[str, Any]) -> bool:
    """The direct path is proven: a current proof kind that agrees with the facts."""
    return io.direct_proven and disagreement(io, facts) is None


def unproven_reason(io: IoTestResult, facts: Mapping[str, Any]) -> str | None:
    """Why a record's I/O test does not prove the direct path under today's rules, for a record
    that claims it did (path ``direct``, data verified, some proof named); None otherwise."""
    proof = io.evidence.get("proof")
    if io.path_taken != PATH_DIRECT or not io.verified or not proof:
        return None
    if proof not in PROOF_KINDS:
        return (f"its proof kind {str(proof)[:40]!r} was written by an earlier release and "
                f"proves nothing today (only {', '.join(PROOF_KINDS)} count): run "
                f"`provisioner verify` on it again")
    return disagreement(io, facts)


__all__ = ["counts", "disagreement", "unproven_reason"]

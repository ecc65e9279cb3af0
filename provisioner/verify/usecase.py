"""Verifying one node, the use case behind ``provisioner verify`` and the rollout's verification.

Connect through the node's runner, gather its facts, run ``gdscheck -p`` and the I/O test,
evaluate the policy (:func:`provisioner.verify.verify_node`), optionally publish the NFD feature
file, and hand back the node's report as a dict ready for the ledger and the report writers.
A node's own failures never raise: an unreachable node or an internal error is a report too.

Callers: ``provisioner/commands/verify.py`` (the fleet loop, the ledger and the output of
``verify``) and ``provisioner/rollout/adapters.py`` (``SshVerifier``, the rollout's check after
each wave). Each records the report in the ledger its own way (``verify``: one verification per
node; the rollout engine: a step of the rollout).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from provisioner.errors import ConnectError
from provisioner.inventory import truthy
from provisioner.redact import redact_text
from provisioner.sanitize import printable
from provisioner.store import utcnow
from provisioner.verify.nfd import DEFAULT_TTL_HOURS


@dataclass(frozen=True)
class NodeRequest:
    """What verifying one node takes besides its runner and the policy: the node's name, its
    I/O test options and whether (with which expiry) to write its NFD feature file."""

    name: str
    io: Any  # IoTestOptions (or a stand-in with the same fields)
    nfd_ttl_hours: float | None = None  # None: no NFD feature file; 0: one that never expires
    attest_record: bool = True  # write the node's record for attest (verify --no-attest-record)
    simulated: bool = False  # the inventory's gdsfleet_simulated (said in the record too)

    @classmethod
    def for_node(cls, node: Any, name: str, io: Any, *, nfd: bool = False,
                 nfd_ttl_hours: float = DEFAULT_TTL_HOURS,
                 attest_record: bool = True) -> NodeRequest:
        """The request for an inventory node (or a bare host name with ``--local``):
        the inventory's ``gds_verify_io_size`` sizes its I/O test unless ``--io-size`` was
        given, and ``nfd`` or the inventory's ``gds_nfd_features`` asks for the feature file."""
        for_node = getattr(io, "for_node", None)
        if for_node is not None:
            io = for_node(getattr(node, "verify_io_size", None))
        wants_nfd = nfd or truthy((getattr(node, "vars", None) or {}).get("gds_nfd_features"))
        return cls(name=name, io=io, nfd_ttl_hours=nfd_ttl_hours if wants_nfd else None,
                   attest_record=attest_record, simulated=getattr(node, "simulated", False) is True)

    def options(self) -> dict[str, Any]:
        """The keyword options of :func:`verify_one` for this request (only those that differ
        from its defaults: none for a plain verification)."""
        out: dict[str, Any] = {}
        if self.nfd_ttl_hours is not None:
            out["nfd_ttl_hours"] = self.nfd_ttl_hours
        if not self.attest_record:
            out["attest_record"] = False
        if self.simulated:
            out["simulated"] = True
        return out


def unreachable_doc(name: str, started: str, t0: float, error: str, *, internal: bool = False
                    ) -> dict[str, Any]:
    """The report of a node that could not be verified: unreachable (``error`` from the
    connection), or ``internal`` (a bug; the node counts as reachable, not compliant)."""
    from provisioner.verify import unreachable_report
    from provisioner.verify.model import NodeReport

    if internal:
        doc = NodeReport(name=name, reachable=True, compliant=False, route="unknown",
                         error=error, started_at=started,
                         duration_s=time.monotonic() - t0).to_dict()
        doc["internal_error"] = True
        return doc
    doc = unreachable_report(name, error).to_dict()
    doc["duration_s"] = round(time.monotonic() - t0, 3)
    return dict(doc)


def internal_error(exc: BaseException | None) -> str:
    """The ledger's and report's record of an internal error: redacted and bounded."""
    from provisioner.sanitize import clip

    return redact_text(clip(f"internal error: {exc!r}", 4000))


def verify_one(runner: Any, name: str, policy: Any, io: Any, *,
               nfd_ttl_hours: float | None = None, attest_record: bool = True,
               simulated: bool = False) -> dict[str, Any]:
    """Verify one node through ``runner``; never raises for the node's own failures.
    ``nfd_ttl_hours`` not None: also write the node's NFD feature file (0 = no expiry).
    ``attest_record``: write the node's record for ``attest`` (provisioner/verify/attest_record.py;
    ``simulated`` is said in it)."""
    from provisioner.verify import verify_node

    started, t0 = utcnow(), time.monotonic()
    try:
        connect = getattr(runner, "connect", None)
        if connect is not None:
            connect()
        report = verify_node(runner, name, policy, io)
        doc = dict(report.to_dict())
        if attest_record and doc.get("reachable"):
            from provisioner.verify import attest_record as record

            doc["attest_record"] = record.publish(runner, name, doc, simulated=simulated)
        if nfd_ttl_hours is not None and report.reachable:
            from provisioner.verify import nfd

            doc["nfd"] = nfd.publish(runner, doc, ttl_hours=nfd_ttl_hours)
        return doc
    except ConnectError as exc:
        return unreachable_doc(name, started, t0, str(exc))
    except Exception as exc:  # a bug: keep the other nodes going; traceback to the debug log
        from provisioner.debuglog import one_line, write_traceback

        where = write_traceback(f"provisioner verify: internal error on {name}", exc)
        # the exception's text may quote node output or a secret: redacted, one printable line
        sys.stderr.write(printable(redact_text(
            f"provisioner verify: internal error on {name} (a bug, please report it): "
            f"{one_line(exc)}; traceback in {where or 'no file (unwritable)'}")) + "\n")
        return unreachable_doc(name, started, t0, internal_error(exc), internal=True)
    finally:
        close = getattr(runner, "close", None)
        if close is not None:
            close()


__all__ = ["NodeRequest", "internal_error", "unreachable_doc", "verify_one"]

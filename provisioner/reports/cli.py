"""The glue between the commands (verify, rollout, report) and the report writers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from provisioner.errors import LedgerError, UsageError


def check_prom_dir(value: str | None) -> None:
    """Refuse (exit 64) a ``--prom-textfile DIR`` that cannot take ``DIR/gdsfleet.prom``."""
    if not value:
        return
    if value == "-":
        raise UsageError("--prom-textfile -: give node_exporter's textfile directory, "
                         "e.g. /var/lib/node_exporter/textfile_collector")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"--prom-textfile {value}: is not a directory; give the directory "
                         f"node_exporter's --collector.textfile.directory names")
    from provisioner.outputs import check_output_path
    from provisioner.reports.prom import FILENAME

    check_output_path("--prom-textfile", str(path / FILENAME), stdout_ok=False)


def ledger_drift(location: str | None, run_id: str) -> dict[str, list[str]]:
    """``{node: drift reasons}`` of run ``run_id`` (read-only); empty without a ledger."""
    if not location:
        return {}
    from provisioner.store import open_read_only

    try:
        with open_read_only(location) as ledger:
            return {r["node"]: r["drift"] for r in ledger.run_verifications(run_id)}
    except LedgerError:
        return {}  # the run's own report still renders; drift is what the ledger adds


def write_live(doc: Mapping[str, Any], *, html: str | None = None, prom_dir: str | None = None,
               location: str | None, run_id: str) -> None:
    """HTML and Prometheus of a live run: its document plus the drift the ledger knows."""
    from provisioner.reports import write_reports
    from provisioner.reports.model import attach_drift

    full = attach_drift(dict(doc), ledger_drift(location, run_id))
    write_reports(full, html=html, prom_dir=prom_dir)


__all__ = ["check_prom_dir", "ledger_drift", "write_live"]

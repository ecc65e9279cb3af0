"""Node Feature Discovery local feature file: the verified GDS state, as node labels.

NFD's worker reads every file in ``/etc/kubernetes/node-feature-discovery/features.d/`` (its
``local`` source; the file is at most 64 kB, dot files are ignored, ``#`` lines are comments,
``# +expiry-time=<RFC3339>`` makes the lines after it expire) and turns each
``<namespace>/<name>=<value>`` line into a node label. NFD's master accepts the namespace
``feature.node.kubernetes.io`` and its sub-namespaces always, so the labels use
``gds.feature.node.kubernetes.io``; names and values must be valid Kubernetes label names and
values (<= 63 characters of ``[A-Za-z0-9._-]``, alphanumeric at both ends), which is why the
timestamp is written as ``20261122T181835Z``. A training pod then selects proven nodes with
``nodeSelector: {gds.feature.node.kubernetes.io/compliant: "true"}``.

The file is written atomically (a dot file in the same directory, mode 0644, renamed over the
old one), as NFD's customization guide asks, by ``provisioner verify --nfd`` (or the inventory
variable ``gds_nfd_features: true``) over the node's own SSH session.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime, timedelta, timezone
from typing import Any

from provisioner.verify.model import CommandRunner

FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
FILE_NAME = "gdsfleet-gds"
LABEL_NS = "gds.feature.node.kubernetes.io"
DEFAULT_TTL_HOURS = 168.0
MAX_FILE_BYTES = 65536
WRITE_TIMEOUT_S = 30.0

_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")  # no "\n" in a label

# Runs on the node: content on stdin, atomic replace through a dot file (NFD skips dot files).
_WRITER = r"""
import os, sys
d, name = sys.argv[1], sys.argv[2]
data = sys.stdin.buffer.read()
os.makedirs(d, mode=0o755, exist_ok=True)
tmp = os.path.join(d, "." + name + ".tmp")
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
try:
    os.write(fd, data)
    os.fchmod(fd, 0o644)
    os.fsync(fd)
finally:
    os.close(fd)
os.replace(tmp, os.path.join(d, name))
print("written " + os.path.join(d, name))
"""


def label_value(text: str) -> str:
    """``text`` as a valid label value: other characters become ``-``, cut to 63, trimmed to
    alphanumeric ends (pure)."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63]
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
    return value


def _stamp(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def labels(report: dict[str, Any], verified_at: datetime) -> dict[str, str]:
    """The labels of one node's verification report (``NodeReport.to_dict()``), pure."""
    io = report.get("io_test") or {}
    facts = report.get("facts") or {}
    out = {
        "compliant": "true" if report.get("compliant") else "false",
        "route": label_value(str(report.get("route") or "unknown")),
        "io-path": label_value(str(io.get("path_taken") or "skipped")),
        "verified-at": _stamp(verified_at),
        "operator-managed": "true" if (facts.get("operator") or {}).get("managed") else "false",
    }
    nvfs_version = (facts.get("nvfs") or {}).get("version")
    if nvfs_version:
        out["nvidia-fs"] = label_value(str(nvfs_version))
    return {f"{LABEL_NS}/{k}": v for k, v in out.items() if _VALUE_RE.match(v)}


def render(node_labels: dict[str, str], verified_at: datetime,
           ttl_hours: float | None = DEFAULT_TTL_HOURS) -> str:
    """The feature file's text (pure). ``ttl_hours`` None or 0: the labels never expire."""
    lines = [
        "# Written by gdsfleet `provisioner verify --nfd`: the GPUDirect Storage state this node",
        f"# proved at {verified_at.astimezone(timezone.utc).isoformat(timespec='seconds')}.",
        "# Do not edit: the next verification replaces this file.",
    ]
    if ttl_hours:
        expiry = verified_at + timedelta(hours=ttl_hours)
        lines.append("# +expiry-time="
                     + expiry.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    lines += [f"{k}={v}" for k, v in sorted(node_labels.items())]
    text = "\n".join(lines) + "\n"
    if len(text.encode()) > MAX_FILE_BYTES:  # cannot happen with these labels; NFD would skip it
        raise ValueError(f"NFD feature file over {MAX_FILE_BYTES} bytes")
    return text


def write_command(directory: str = FEATURES_DIR, name: str = FILE_NAME) -> str:
    """Shell command that writes stdin to the feature file (as root, or through ``sudo -n``)."""
    body = (f"python3 -c {shlex.quote(_WRITER)} {shlex.quote(directory)} "
            f"{shlex.quote(name)}")
    return f'if [ "$(id -u)" = 0 ]; then {body}; else sudo -n {body}; fi'


def write(runner: CommandRunner, text: str, directory: str = FEATURES_DIR,
          name: str = FILE_NAME) -> dict[str, Any]:
    """Write the feature file on the node; never raises for node-side failures (the result
    says what went wrong). ConnectError (transport) propagates."""
    path = f"{directory.rstrip('/')}/{name}"
    res = runner.run(write_command(directory, name), timeout=WRITE_TIMEOUT_S,
                     stdin=text.encode())
    if res.exit_status == 0:
        return {"path": path, "written": True, "error": None}
    why = (res.stderr or res.stdout).strip()[-300:] or f"exit {res.exit_status}"
    return {"path": path, "written": False,
            "error": f"{why} (the feature file needs root: connect as root or allow "
                     "passwordless sudo for python3)"}


def publish(runner: CommandRunner, report: dict[str, Any], *,
            ttl_hours: float | None = DEFAULT_TTL_HOURS,
            now: datetime | None = None) -> dict[str, Any]:
    """Labels, text and write result for one verified node (the report's ``nfd`` entry)."""
    verified_at = now or datetime.now(timezone.utc)
    node_labels = labels(report, verified_at)
    text = render(node_labels, verified_at, ttl_hours)
    result = write(runner, text)
    result["labels"] = node_labels
    return result


__all__ = ["FEATURES_DIR", "FILE_NAME", "LABEL_NS", "label_value", "labels", "publish",
           "render", "write", "write_command"]

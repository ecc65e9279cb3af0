"""Where the ledger lives: ``--ledger``, ``$GDSFLEET_LEDGER`` or the inventory's default, the
name a fleet has in it, and the location as messages show it (password hidden)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_LEDGER = "GDSFLEET_LEDGER"


def fleet_id(inventory: str | os.PathLike[str]) -> str:
    """The name a fleet has in the ledger: its inventory's absolute path.

    ``verify`` and ``rollout`` both use this, so ``last_unfinished_run(kind, fleet)`` finds the
    run of the same fleet whichever relative path the operator typed.
    """
    return str(Path(inventory).expanduser().resolve())


def default_ledger(inventory: str | os.PathLike[str] | None = None) -> str:
    """Where the ledger lives when neither ``--ledger`` nor ``GDSFLEET_LEDGER`` says.

    The simulated lab (an inventory at ``<repo>/inventories/lab``) keeps its ledger in
    ``<repo>/.lab/ledger.sqlite``; anything else in ``~/.local/state/gdsfleet/ledger.sqlite``
    (``$XDG_STATE_HOME`` honoured).
    """
    if inventory is not None:
        p = Path(inventory).expanduser().resolve()
        for cand in (p, *p.parents):
            if cand.name == "lab" and cand.parent.name == "inventories":
                return str(cand.parent.parent / ".lab" / "ledger.sqlite")
            if cand.name == "inventories":
                break
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return str(Path(state) / "gdsfleet" / "ledger.sqlite")


def resolve_ledger(
    explicit: str | None, inventory: str | os.PathLike[str] | None = None
) -> str:
    """``--ledger`` first, then ``$GDSFLEET_LEDGER``, then :func:`default_ledger`.

    The same rule for every command; an ``-i`` inventory that does not exist is refused here
    (exit 64) for every command alike, never silently replaced by the default ledger.
    """
    if inventory is not None and not Path(inventory).expanduser().exists():
        from provisioner.errors import UsageError

        raise UsageError(
            f"inventory {str(inventory)!r} does not exist; pass -i with an inventory file or "
            f"directory (for the simulated lab: inventories/lab)")
    return explicit or os.environ.get(ENV_LEDGER) or default_ledger(inventory)


def lab_hint(explicit: str | None, inventory: str | os.PathLike[str] | None,
             location: str) -> str | None:
    """When a command was given no ledger at all (no ``--ledger``, ``$GDSFLEET_LEDGER`` or
    ``-i``) in a gdsfleet checkout whose simulated lab has a ledger that is not the one read:
    how to read the lab's (issue 47: ``status`` in a checkout read another ledger, and its
    "run verify first" named no inventory)."""
    if explicit or os.environ.get(ENV_LEDGER) or inventory is not None:
        return None
    lab = Path(".lab") / "ledger.sqlite"
    if not (lab.is_file() and Path("inventories/lab").is_dir()):
        return None
    if "://" not in location and Path(location).expanduser().resolve() == lab.resolve():
        return None
    return (f"this checkout's lab keeps its ledger in {lab}: pass -i inventories/lab to read "
            f"it (each command finds its ledger by -i, --ledger or ${ENV_LEDGER})")


def display_url(url_or_path: str) -> str:
    """The ledger location with any password hidden (for messages and logs): the URL's
    password and a ``password=`` query parameter (provisioner.redact)."""
    from provisioner.redact import redact_text

    if "://" not in url_or_path:
        return redact_text(url_or_path)
    # SQLAlchemy only for a URL: a command run without a ledger never imports it
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return redact_text(make_url(url_or_path).render_as_string(hide_password=True))
    except ArgumentError:
        return "<unparseable ledger URL>"


def ledger_line(location: str | None) -> str:
    """The line every command prints first: which ledger it reads or writes (issue 30).

    One wording for ``status``, ``history``, ``report``, ``plan``, ``verify`` and ``rollout``,
    the password hidden and the text escaped (a location may come from the environment);
    ``None`` is ``verify --no-ledger``.
    """
    from provisioner.sanitize import printable

    if location is None:
        return "ledger: none (--no-ledger: nothing is read or recorded)"
    return printable(f"ledger {display_url(location)}")

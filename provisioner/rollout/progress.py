"""What a person sees during and after a rollout, and the machine-readable reports.

:class:`LiveObserver` draws a live view with rich (overall bar, wave bar, a table of per-node
states); :class:`PlainObserver` prints one line per event when the output is not a terminal
(CI logs, pipes). Both go to stderr so ``--json -`` keeps stdout clean. ``summary_table``
renders the final result; the files (JSON, JUnit, HTML) are :func:`live_document`, the run
read back from the ledger, written by provisioner.reports.
"""

from __future__ import annotations

import os
import sys
import textwrap
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any

from provisioner.rollout.engine import (
    COMPLIANT,
    DONE_STEPS,
    FAILED,
    REBOOT_PENDING,
    SKIPPED,
    RolloutResult,
    WaveSummary,
)
from provisioner.rollout.planner import Plan, Wave
from provisioner.sanitize import printable

_STYLE = {
    "pending": "dim",
    "provisioning": "cyan",
    "rebooting": "magenta",
    "verifying": "blue",
    COMPLIANT: "green",
    FAILED: "red",
    SKIPPED: "yellow",
    REBOOT_PENDING: "yellow",
    "interrupted": "magenta",  # stopped by SIGINT/SIGTERM; redone on resume
    "lost": "magenta",  # its playbook's stream ended without a final result; redone on resume
}


class PlainObserver:
    """One line per event, for logs and pipes."""

    def __init__(self, stream: IO[str] | None = None, *, verbose: bool = False) -> None:
        self.out = stream or sys.stderr
        self.verbose = verbose
        self.total = 0
        self.finished = 0
        self._lock = threading.Lock()
        self._last: dict[str, str] = {}

    def _print(self, text: str) -> None:
        with self._lock:
            self.out.write(printable(text) + "\n")  # node text: control characters escaped
            self.out.flush()

    def plan(self, plan: Plan, *, run_id: str, resumed: bool, done: Mapping[str, str]) -> None:
        self.total = len(plan)
        self.finished = len(done)
        what = "resuming" if resumed else "starting"
        from provisioner.rollout.planner import describe_plan

        # how the spec collapsed on this fleet, not only how many waves (issue 30 item 5)
        self._print(
            f"rollout {run_id}: {what}: {describe_plan(plan)}"
            + (f"; {len(done)} already finished" if done else "")
        )

    def wave_start(self, wave: Wave, todo: Sequence[str]) -> None:
        self._print(f"== {wave.label}: {len(todo)} node(s): {', '.join(todo)}")

    def node(self, name: str, step: str, message: str = "") -> None:
        if self._last.get(name) == step and not self.verbose:
            return
        self._last[name] = step
        if step in DONE_STEPS:
            self.finished += 1
        # cut at a word: the whole reason is on the node's line under the summary table
        short = textwrap.shorten(message, 200, placeholder=" ...") if message.strip() else ""
        tail = f" ({short})" if short and step in DONE_STEPS else ""
        self._print(f"[{self.finished}/{self.total}] {name}: {step}{tail}")

    def gate(self, name: str, ok: bool, message: str) -> None:
        self._print(f"gate {name}: {'pass' if ok else 'FAIL'}: {message}")

    def wave_end(self, wave: Wave, summary: WaveSummary) -> None:
        self._print(
            f"== {wave.label}: {summary.compliant} compliant, {summary.failures} failure(s) "
            f"(allowed {summary.allowed_failures}), {summary.reboot_pending} reboot pending, "
            + (f"{summary.lost} lost (no failure), " if summary.lost else "")
            + f"{summary.duration_s:.1f}s: {'passed' if summary.passed else 'STOPPED'}"
        )

    def message(self, text: str) -> None:
        self._print(text)

    def close(self) -> None:
        pass


def _lit(text: Any) -> str:
    """Text from a node or a playbook inside Rich markup: control characters escaped and
    ``[...]`` taken literally (a failure text holding ``[/x]`` crashed the view)."""
    from rich.markup import escape

    return escape(printable(str(text)))


class LiveObserver:
    """rich live view: overall bar, wave bar and per-node states (a terminal only)."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            console=self.console,
        )
        self.overall = self.progress.add_task("overall", total=1)
        self.wave_task: Any = None
        self.states: dict[str, tuple[str, str]] = {}
        self.wave_nodes: list[str] = []
        self._lock = threading.Lock()
        self.live = Live(self._render(), console=self.console, refresh_per_second=4,
                         transient=False)
        self.live.start()

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
        table.add_column("node")
        table.add_column("step")
        table.add_column("detail", overflow="fold")
        for name in self.wave_nodes[-40:]:
            step, msg = self.states.get(name, ("pending", ""))
            table.add_row(_lit(name), f"[{_STYLE.get(step, '')}]{_lit(step)}[/]",
                          _lit(msg[:100]))
        return Group(self.progress, table)

    def _refresh(self) -> None:
        self.live.update(self._render())

    def plan(self, plan: Plan, *, run_id: str, resumed: bool, done: Mapping[str, str]) -> None:
        with self._lock:
            self.progress.update(self.overall, total=len(plan), completed=len(done),
                                 description=f"rollout {run_id}")
            from provisioner.rollout.planner import describe_plan

            what = "resuming" if resumed else "starting"
            self.console.print(_lit(f"rollout {run_id}: {what}: "
                                    f"{describe_plan(plan)}"
                                    + (f"; {len(done)} node(s) finished" if done else "")),
                               soft_wrap=True)
            self._refresh()

    def wave_start(self, wave: Wave, todo: Sequence[str]) -> None:
        with self._lock:
            if self.wave_task is not None:
                self.progress.remove_task(self.wave_task)
            self.wave_task = self.progress.add_task(wave.label, total=len(todo))
            self.wave_nodes = list(todo)
            self._refresh()

    def node(self, name: str, step: str, message: str = "") -> None:
        with self._lock:
            before = self.states.get(name, ("", ""))[0]
            self.states[name] = (step, message)
            if step in DONE_STEPS and before not in DONE_STEPS:
                self.progress.advance(self.overall)
                if self.wave_task is not None:
                    self.progress.advance(self.wave_task)
            self._refresh()

    def gate(self, name: str, ok: bool, message: str) -> None:
        with self._lock:
            self.console.print(f"gate {_lit(name)}: {'[green]pass' if ok else '[red]FAIL'}[/] "
                               f"{_lit(message)}")

    def wave_end(self, wave: Wave, summary: WaveSummary) -> None:
        with self._lock:
            verdict = "[green]passed[/]" if summary.passed else "[red]STOPPED[/]"
            self.console.print(
                f"{_lit(wave.label)}: {summary.compliant} compliant, {summary.failures} failure(s) "
                f"(allowed {summary.allowed_failures}) {verdict}"
            )

    def message(self, text: str) -> None:
        with self._lock:
            self.console.print(_lit(text))

    def close(self) -> None:
        self.live.stop()


def make_observer(*, quiet: bool = False, plain: bool | None = None) -> Any:
    """Live view on a terminal, plain lines otherwise, nothing when quiet."""
    from provisioner.rollout.engine import NullObserver

    if quiet:
        return NullObserver()
    if plain is None:
        plain = not sys.stderr.isatty() or os.environ.get("TERM") == "dumb"
    return PlainObserver() if plain else LiveObserver()


def summary_table(result: RolloutResult, stream: IO[str] | None = None,
                  inventory: str | None = None, simulated: Sequence[str] = ()) -> None:
    """The final per-node table, one line per node that failed (what, where, what to do),
    the verdict, and the line every report has when the inventory marks nodes simulated."""
    import textwrap

    from rich.console import Console
    from rich.table import Table

    from provisioner.rollout.explain import explain_nodes, short_reason

    console = Console(file=stream or sys.stderr, width=140 if stream is None else 140)
    table = Table(title=_lit(f"rollout {result.run_id}: {result.status}"), show_lines=False)
    for col in ("node", "wave", "action", "step", "detail"):
        table.add_column(col, overflow="fold")
    for n in result.nodes.values():
        wave = "canary" if n.wave == 0 else str(n.wave)
        detail = short_reason(n.failure, n.reason) + (" (finished earlier)"
                                                       if n.carried_over else "")
        # cut at a word, never mid-word; the whole reason is on the node's line below
        cell = textwrap.shorten(detail, 100, placeholder=" ...") if detail.strip() else ""
        table.add_row(_lit(n.name), wave, _lit(str(n.action)),
                      f"[{_STYLE.get(n.step, '')}]{_lit(n.step)}[/]", _lit(cell))
    console.print(table)
    for line in explain_nodes(result.nodes.values(), inventory):
        # one line each, whatever the node said (escaped; never wrapped by rich); a playbook's
        # multi-line message reads as one line, not with its newlines shown as \x0a
        console.print(_lit(" ".join(line.split())), soft_wrap=True)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(result.counts().items()))
    console.print(_lit(f"{result.message} [{counts}] in {result.duration_s:.1f}s; "
                       f"exit {int(result.exit_code)}"), soft_wrap=True)
    from provisioner.reports.model import simulated_line

    marked = set(simulated)
    sim = simulated_line([{"simulated": n.name in marked} for n in result.nodes.values()])
    if sim:  # the same words as verify's, status's and the HTML banner (issue 47)
        console.print(_lit(sim), soft_wrap=True)


def report_dict(result: RolloutResult, *, location: str | None = None,
                inventory: str | None = None,
                simulated: Sequence[str] = ()) -> dict[str, Any]:
    """The rollout document of ``result`` from memory, by the one writer the ledger's
    ``report RUN`` uses (:func:`provisioner.reports.model.rollout_document`): what
    :func:`live_document` falls back to when the ledger cannot be read back."""
    from provisioner.reports.model import rollout_document

    run = {"id": result.run_id, "status": result.status,
           "args": {"plan": result.plan.to_dict(), "inventory": inventory,
                    "simulated": sorted(simulated)}}
    verifications = {n.name: n.verification for n in result.nodes.values() if n.verification}
    return rollout_document(run, {}, verifications, result.to_dict(verifications=False),
                            location=location)


def live_document(result: RolloutResult, location: str, *, inventory: str | None = None,
                  simulated: Sequence[str] = ()) -> dict[str, Any]:
    """What ``rollout --json``/``--junit``/``--html`` write: the run read back from the
    ledger it was just recorded in, exactly as ``provisioner report RUN`` reads it (one
    shape, one writer, issue 47); from memory when the ledger cannot be read back (then
    without the ledger's time stamps and with the verifications' summaries)."""
    from provisioner.errors import LedgerError
    from provisioner.reports.model import from_ledger
    from provisioner.store import display_url, open_read_only

    shown = display_url(location)
    try:
        with open_read_only(location) as ledger:
            if ledger.run_result(result.run_id) is not None:
                return from_ledger(ledger, result.run_id, location=shown)
    except LedgerError:
        pass
    return report_dict(result, location=shown, inventory=inventory, simulated=simulated)

"""The ``provisioner`` command line."""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from provisioner import __version__
from provisioner.commands import COMMANDS
from provisioner.debuglog import report_internal
from provisioner.errors import ProvisionerError
from provisioner.exitcodes import Exit
from provisioner.identifiers import protect_static, warning
from provisioner.redact import forget_all, redact_text, register_argv
from provisioner.sanitize import printable

# OSErrors that say the storage failed, not the program: exit 74 (LEDGER, sysexits EX_IOERR)
_IO_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})

_HELP = {
    "verify": "prove node by node that GPUDirect Storage takes the direct path",
    "status": "latest compliance state of every node in the ledger",
    "history": "compliance history of one node",
    "plan": "print the rollout waves and what would change; changes nothing",
    "rollout": "provision the fleet in gated waves (canary first), resumable",
    "export": ("print a training job's GDS settings (DeepSpeed aio block, kvikio env) from "
               "the ledger"),
    "report": "render a run of the ledger as HTML, JSON, JUnit or a Prometheus textfile",
    "exec-nodes": ("check the execution nodes of --executor ssh against this controller, or "
                   "fence a run's dispatches there"),
    "attest": "on a node: is it still in the state its last verify proved? (no SSH, no I/O "
              "test)",
}


# What an interrupted command leaves, and what to do: only a rollout resumes (issue 47: verify
# promised a resume it does not have).
_AFTER_INTERRUPT = {
    "rollout": "the ledger holds where it stopped, run the same command again to resume",
    "verify": "the nodes verified before it are recorded and the run is marked interrupted "
              "(`provisioner report latest` passes over it); a verification does not resume: "
              "run the same command again to verify every node",
    "exec-nodes": "run the same command again (a fence kills what is still left)",
    "": "nothing was changed; run the same command again",
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad value is one line and a hint, not the whole usage first
    (``verify --parallel x`` printed 11 lines of usage before its error), and it exits 64
    (``Exit.USAGE``), as every other bad command line does: argparse's own 2 is
    ``Exit.UNREACHABLE`` here, so a typo read as "a node could not be reached" (issue 47).
    An option is never abbreviated (``allow_abbrev=False``): ``--wave 1`` ran as ``--waves
    1`` before, and an abbreviation that one more option makes ambiguous breaks scripts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(int(Exit.USAGE), f"{self.prog}: error: {message}\n"
                                   f"(see '{self.prog} --help' for every option)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser. Given ``only``, the first word of the command line, only the
    module of the command it names is imported and given its options (the others are listed,
    with their one-line help; a word that is no command imports none), so a command does not
    pay for every other command's imports (``verify`` alone brings the verification and
    report packages). Without it every command is complete."""
    parser = _Parser(
        prog="provisioner",
        description="Roll out and verify GPUDirect Storage across bare-metal GPU fleets.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=_HELP.get(name, ""), description=_HELP.get(name, ""))
        p.set_defaults(_module=module)
        if only is not None and name != only:
            continue
        try:
            mod = importlib.import_module(f"provisioner.commands.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"provisioner.commands.{module}":
                raise
            p.set_defaults(_missing=True)
            continue
        mod.add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # the secrets on this command line and in the environment are masked in every message,
    # report, ledger row and log line from here on (provisioner.redact)
    # (this invocation's own: a library caller's earlier invocations are forgotten)
    forget_all()
    words = list(sys.argv[1:] if argv is None else argv)
    register_argv(list(words), os.environ)
    protect_static()  # a secret spelled like a check id or a label is never masked (issue 45)
    _warn_refused_secrets()
    # the first word that is not an option names the command (the top level's only options,
    # -h and --version, take no value)
    parser = build_parser(next((w for w in words if not w.startswith("-")), ""))
    args, extra = parser.parse_known_args(words)
    if extra:
        # said by the sub-command's parser, so the error names it (``provisioner status:
        # error: unrecognized arguments: --bogus``), not the top level's
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return int(Exit.USAGE)
    if getattr(args, "_missing", False):
        print(f"provisioner: '{args.command}' is not available in this build", file=sys.stderr)
        return int(Exit.USAGE)
    prog = f"provisioner {args.command}"
    _quiet_library_loggers()
    try:
        mod = importlib.import_module(f"provisioner.commands.{args._module}")
        from provisioner import interrupts

        # SIGINT and SIGTERM are ours for the whole command (exit 130 / 143), whatever a
        # library installs meanwhile (see provisioner.interrupts)
        with interrupts.handling():
            return int(mod.run(args))
    except ProvisionerError as exc:
        message = redact_text(" ".join(str(exc).split()) or type(exc).__name__)
        # a ledger row's node name or a node's text may hold escape sequences
        print(printable(f"{prog}: error: {message}"), file=sys.stderr)
        code = getattr(exc, "exit_code", 1)
        return int(code)
    except KeyboardInterrupt as exc:
        what = "SIGTERM" if getattr(exc, "signum", 2) == 15 else "SIGINT"
        print(f"provisioner {args.command}: interrupted ({what}); "
              f"{_AFTER_INTERRUPT.get(args.command, _AFTER_INTERRUPT[''])}", file=sys.stderr)
        return int(getattr(exc, "exit_code", Exit.INTERRUPTED))
    except BrokenPipeError:  # `provisioner status | head`: not an error of ours
        with contextlib.suppress(OSError):
            sys.stderr.close()
        return int(Exit.OK)
    except OSError as exc:
        if exc.errno not in _IO_ERRNOS:
            report_internal(prog, exc)
            return int(Exit.INTERNAL)
        # a full disk, a read-only mount, a failing device: not a bug (74, I/O; one line)
        where = f" on {exc.filename}" if exc.filename else ""
        print(printable(redact_text(f"{prog}: error: I/O error{where}: {exc.strerror}; free "
                                    f"space (or fix the filesystem) and run the same command "
                                    f"again")),
              file=sys.stderr)
        return int(Exit.LEDGER)
    except Exception as exc:  # noqa: BLE001 - a bug: one line here, the traceback in a file
        report_internal(prog, exc)
        return int(Exit.INTERNAL)


def _innermost(parser: argparse.ArgumentParser,
               args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub-)sub-command ``args`` ran: ``provisioner export env``'s for
    ``export env ...``, the top level's when no command was given."""
    current = parser
    while True:
        subs = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs and subs[0].dest else None
        if not subs or not isinstance(chosen, str) or chosen not in subs[0].choices:
            return current
        current = subs[0].choices[chosen]


def _warn_refused_secrets() -> None:
    """One line per secret too short or too common to mask in free text (it would mask the
    reports' own words): the operator learns where it is not hidden, and how to fix that."""
    from provisioner.redact import refusals

    for source, reason in refusals():
        print(printable(warning(source, reason)), file=sys.stderr)


def console_main() -> int:
    """The ``provisioner`` program (and ``python -m provisioner``): :func:`main`, then an exit
    without the interpreter's last cycle collections.

    At exit CPython clears every module and collects cycles over all that ansible-core,
    SQLAlchemy and the rest left in memory: about 0.1 CPU-s of a rollout's or a verification's
    start-to-end cost, for memory that the process gives back whole a moment later. Frozen
    objects are skipped by those collections; files, the ledger and the reports are closed by
    then, and ``atexit`` and ``weakref.finalize`` callbacks still run. A library caller of
    :func:`main` (the tests) keeps its collector as it was."""
    code = main()
    gc.freeze()
    return code


def _quiet_library_loggers() -> None:
    """Libraries that log exceptions (paramiko's transport thread logs a full traceback for a
    host that never sends an SSH banner) must not reach stderr through Python's last-resort
    handler: our own errors say what happened, in one line."""
    for name in ("paramiko",):
        log = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
            log.addHandler(logging.NullHandler())
        log.propagate = False


if __name__ == "__main__":  # pragma: no cover
    sys.exit(console_main())

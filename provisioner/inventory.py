"""Read the same Ansible inventory the playbooks use.

The orchestrator never parses inventory files itself: it asks ansible-core's inventory manager
and vars plugins (``group_vars/``, ``host_vars/``), so host patterns for ``--limit`` and
templated variables mean exactly what they mean to ``ansible-playbook``. Every host name and
connection variable is validated before anything runs: values that would reach a shell or an
SSH command line with metacharacters in them are refused with a message that names the host,
the variable and the fix.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.ansible_inventory import (
    data_loader,
    init_ansible_plugins,
    parse_strict,
    template_value,
)
from provisioner.errors import InventoryError

# Host names: what DNS and Ansible accept, plus ':' and '[]' are not allowed (ranges are
# expanded by Ansible before we see them).
# Each anchored with \Z, never $ (which also matches before a trailing newline, so "n1\n"
# passed). An address never starts with '-' (ssh would read it as an option).
HOSTNAME_RE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.\-]{0,252}\Z")
_ADDRESS_RE = re.compile(r"\A[A-Za-z0-9_.:%\[\]][A-Za-z0-9_.:\-%\[\]]{0,254}\Z")
_USER_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_.\-]{0,63}\$?\Z")
_SHELL_META = set(";&|`$<>(){}\n\r\\\"'*?!#~")

# They replace the OpenSSH client of the playbook runs: refused (host_key_policy_problems).
_EXECUTABLE_VARS = ("ansible_ssh_executable", "ansible_scp_executable", "ansible_sftp_executable")

# Connection variables the orchestrator reads (Ansible's names, with their aliases).
_CONN_VARS = (
    "ansible_host",
    "ansible_ssh_host",
    "ansible_port",
    "ansible_ssh_port",
    "ansible_user",
    "ansible_ssh_user",
    "ansible_ssh_private_key_file",
    "ansible_private_key_file",
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_connection",
    "ansible_become",
    "ansible_python_interpreter",
    # read only to refuse them (host_key_policy_problems): they weaken or replace the
    # playbook half's host-key checking
    "ansible_ssh_args",
    "ansible_scp_extra_args",
    "ansible_sftp_extra_args",
    "ansible_host_key_checking",
    "ansible_ssh_host_key_checking",
    "ansible_paramiko_host_key_checking",
    "ansible_paramiko_host_key_auto_add",
    "ansible_paramiko_record_host_keys",
    *_EXECUTABLE_VARS,
)

# ansible_connection values where the rollout's host-key policy holds: OpenSSH with the
# provisioner's arguments first (StrictHostKeyChecking=yes), or the controller itself.
# paramiko, docker, winrm ... check host keys their own way (or not at all): refused.
SSH_CONNECTIONS = frozenset({"ssh", "smart", "ansible.builtin.ssh", "ansible.legacy.ssh"})
LOCAL_CONNECTIONS = frozenset({"local", "ansible.builtin.local", "ansible.legacy.local"})
# Variables whose SSH options are checked for a weaker host-key policy.
_SSH_ARG_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args",
                 "ansible_scp_extra_args", "ansible_sftp_extra_args")
_HOST_KEY_CHECKING_VARS = ("ansible_host_key_checking", "ansible_ssh_host_key_checking",
                           "ansible_paramiko_host_key_checking")
_AUTO_ADD_VARS = ("ansible_paramiko_host_key_auto_add", "ansible_paramiko_record_host_keys")
_NULL_FILES = {"/dev/null", "none", "nul"}


@dataclass(frozen=True)
class Node:
    """One inventory host, with the connection settings the orchestrator needs."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    ssh_options: tuple[tuple[str, str], ...] = ()
    connection: str = "ssh"
    groups: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # gds_verify_io_size from the inventory (bytes): the I/O test size of this node when
    # --io-size is not given (the lab's 512 MiB disks cannot hold the 1 GiB default).
    verify_io_size: int | None = None
    # gdsfleet_simulated from the inventory: the operator says these nodes are a simulation
    # (the lab's containers); verify and rollout carry it into each node's record, and every
    # report marks it, so a simulated run is never read as hardware. Never detected.
    simulated: bool = False

    def ssh_option(self, name: str) -> str | None:
        """Value of an ``-o Name=value`` option from ``ansible_ssh_common_args``/extra args."""
        for key, value in self.ssh_options:
            if key.lower() == name.lower():
                return value
        return None


@dataclass(frozen=True)
class Inventory:
    """A loaded inventory: the source, and the selected nodes in inventory order."""

    source: str
    nodes: tuple[Node, ...]
    # ansible-core's InventoryManager it was read with (answers host patterns without a
    # second parse of the source); None when built by hand
    manager: Any = field(default=None, compare=False, hash=False, repr=False)

    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def __len__(self) -> int:
        return len(self.nodes)


def _check_value(host: str, var: str, value: str, pattern: re.Pattern[str], what: str) -> None:
    if not pattern.match(value):
        bad = sorted({c for c in value if c in _SHELL_META or c.isspace()})
        detail = f" (characters {''.join(bad)!r} are not allowed)" if bad else ""
        if value.startswith("-"):
            detail += " (it starts with '-', which ssh would read as an option)"
        raise InventoryError(
            f"inventory host {host!r}: {var}={value!r} is not a valid {what}{detail}; "
            f"fix the value in the inventory (hosts file, host_vars/ or group_vars/)"
        )


@functools.lru_cache(maxsize=256)
def _words(args: str) -> tuple[str, ...]:
    """``shlex.split(args)``, once per distinct string: a fleet's hosts mostly share their ssh
    arguments (a group variable), and splitting them was a tenth of reading each host."""
    return tuple(shlex.split(args))


def parse_ssh_args(host: str, var: str, args: str) -> list[tuple[str, str]]:
    """Parse ``-o Key=Value`` / ``-J jump`` options out of ansible_ssh_*_args.

    Only options are accepted; anything else (a command, a redirection) is refused, because the
    same string reaches OpenSSH through Ansible.
    """
    try:
        words = _words(args)
    except ValueError as exc:
        raise InventoryError(f"inventory host {host!r}: {var} cannot be parsed: {exc}") from exc
    options: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("-o", "-J") and i + 1 < len(words):
            value = words[i + 1]
            i += 2
        elif word.startswith("-o") and len(word) > 2:
            value, word = word[2:], "-o"
            i += 1
        else:
            raise InventoryError(
                f"inventory host {host!r}: {var} holds {word!r}; only '-o Option=value' and "
                f"'-J jumphost' are accepted there"
            )
        if any(c in value for c in ";&|`$<>\n\r"):
            raise InventoryError(
                f"inventory host {host!r}: {var} option {value!r} holds shell metacharacters; "
                f"remove them"
            )
        if word == "-J":
            options.append(("ProxyJump", value))
            continue
        key, sep, val = value.partition("=")
        if not sep:
            key, _, val = value.partition(" ")
        options.append((key.strip(), val.strip()))
    return options


def weakening_ssh_options(args: str) -> list[str]:
    """The ``-o`` options in an OpenSSH argument string that weaken or bypass host-key
    checking, as written (``StrictHostKeyChecking=no``). Unparseable text counts as one."""
    try:
        words = _words(args)
    except ValueError:
        return [args]
    found: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-o" and i + 1 < len(words):
            opt, i = words[i + 1], i + 2
        elif word.startswith("-o") and len(word) > 2:
            opt, i = word[2:], i + 1
        else:
            i += 1
            continue
        key, sep, val = opt.partition("=")
        if not sep:
            key, _, val = opt.strip().partition(" ")
        key, val = key.strip().lower(), val.strip().strip("\"'").lower()
        weak = (
            (key == "stricthostkeychecking" and val not in ("yes", "true"))
            or (key in ("userknownhostsfile", "globalknownhostsfile")
                and any(f in _NULL_FILES for f in val.split()))
            or key in ("knownhostscommand", "hostkeyalias")
            or (key == "verifyhostkeydns" and val not in ("no", "false"))
            or (key == "nohostauthenticationforlocalhost" and val not in ("no", "false"))
        )
        if weak:
            found.append(opt)
    return found


def truthy(value: Any) -> bool:
    """An inventory boolean (YAML true, or the strings Ansible reads as true)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _falsy(value: Any) -> bool:
    if isinstance(value, bool):
        return not value
    return str(value).strip().lower() in ("no", "false", "0", "off", "n", "f", "")


def host_key_policy_problems(node: Node) -> list[str]:
    """What in ``node``'s inventory variables weakens or replaces the host-key policy of the
    rollout's playbook runs; each names the host, the variable and the fix. Empty: none."""
    hv = node.vars
    where = "remove it from the inventory (hosts file, host_vars/ or group_vars/)"
    out: list[str] = []
    conn = str(hv.get("ansible_connection") or "ssh").strip()
    if conn not in SSH_CONNECTIONS and conn not in LOCAL_CONNECTIONS:
        out.append(f"host {node.name!r}: ansible_connection={conn!r} checks host keys its own "
                   f"way, outside the provisioner's policy; use ssh (or local for the "
                   f"controller itself)")
    if hv.get("ansible_ssh_args") not in (None, ""):
        out.append(f"host {node.name!r}: ansible_ssh_args replaces the provisioner's SSH "
                   f"arguments (StrictHostKeyChecking=yes among them); put options in "
                   f"ansible_ssh_common_args instead")
    for var in _EXECUTABLE_VARS:
        if hv.get(var) not in (None, ""):
            out.append(f"host {node.name!r}: {var} replaces the OpenSSH client the "
                       f"provisioner's host-key policy relies on (a wrapper can add "
                       f"-o StrictHostKeyChecking=no); {where}")
    for var in _SSH_ARG_VARS:
        value = hv.get(var)
        if value:
            weak = weakening_ssh_options(str(value))
            if weak:
                out.append(f"host {node.name!r}: {var} holds {', '.join(weak)}, which weakens "
                           f"host-key checking; {where}")
    for var in _HOST_KEY_CHECKING_VARS:
        if var in hv and _falsy(hv[var]):
            out.append(f"host {node.name!r}: {var}={hv[var]!r} turns host-key checking off; "
                       f"{where}")
    for var in _AUTO_ADD_VARS:
        if var in hv and not _falsy(hv[var]):
            out.append(f"host {node.name!r}: {var}={hv[var]!r} accepts unknown host keys; "
                       f"{where}")
    return out


def host_key_problems(inventory: Inventory, shown: int = 3) -> list[str]:
    """:func:`host_key_policy_problems` of every selected node, the first ``shown`` of them
    and a count of the rest (a group_vars/ line would otherwise repeat once per host)."""
    found = [(n.name, p) for n in inventory.nodes for p in host_key_policy_problems(n)]
    shown_list = [p for _, p in found[:shown]]
    if len(found) > shown:
        hosts = {name for name, _ in found[shown:]}
        shown_list.append(f"and {len(found) - shown} more such variable(s) on "
                          f"{len(hosts)} host(s)")
    return shown_list


def _node_from_vars(name: str, groups: Iterable[str], hostvars: Mapping[str, Any]) -> Node:
    _check_value(name, "inventory_hostname", name, HOSTNAME_RE, "host name")
    address = str(hostvars.get("ansible_host") or hostvars.get("ansible_ssh_host") or name)
    _check_value(name, "ansible_host", address, _ADDRESS_RE, "host address")
    port_raw = hostvars.get("ansible_port") or hostvars.get("ansible_ssh_port") or 22
    try:
        port = int(port_raw)
    except (TypeError, ValueError):
        port = -1
    if not 0 < port < 65536:
        raise InventoryError(
            f"inventory host {name!r}: ansible_port={port_raw!r} is not a TCP port (1-65535)"
        )
    user = hostvars.get("ansible_user") or hostvars.get("ansible_ssh_user")
    if user is not None:
        user = str(user)
        _check_value(name, "ansible_user", user, _USER_RE, "user name")
    key = hostvars.get("ansible_ssh_private_key_file") or hostvars.get(
        "ansible_private_key_file"
    )
    if key is not None:
        key = os.path.expanduser(str(key))
        if any(c in key for c in ";&|`$<>\n\r"):
            raise InventoryError(
                f"inventory host {name!r}: ansible_ssh_private_key_file={key!r} holds shell "
                f"metacharacters; use a plain path"
            )
    options: list[tuple[str, str]] = []
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if hostvars.get(var):
            options.extend(parse_ssh_args(name, var, str(hostvars[var])))
    for var, value in hostvars.items():
        if (
            isinstance(value, str)
            and var.startswith(("gds_", "cuda_", "mofed_", "nvme_"))
            and (any(c in value for c in "`\n\r") or "$(" in value)
        ):
                raise InventoryError(
                    f"inventory host {name!r}: {var}={value!r} holds shell command "
                    f"substitution or a newline; these variables reach the node's shell"
                )
    io_size = _verify_io_size(name, hostvars.get("gds_verify_io_size"))
    return Node(
        verify_io_size=io_size,
        simulated=simulated_flag(name, hostvars.get(SIMULATED_VAR)),
        name=name,
        address=address,
        port=port,
        user=user,
        key_file=key,
        ssh_options=tuple(options),
        connection=str(hostvars.get("ansible_connection") or "ssh"),
        groups=tuple(sorted(groups)),
        vars=dict(hostvars),
    )


SIMULATED_VAR = "gdsfleet_simulated"


def simulated_flag(host: str, value: Any) -> bool:
    """The inventory's ``gdsfleet_simulated``: a YAML boolean only (unset is false).

    It decides whether every report calls the node a simulation, so a string ("yes", "false")
    or a number is refused rather than guessed at.
    """
    if value is None or isinstance(value, bool):
        return bool(value)
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:60] + "..."
    raise InventoryError(
        f"inventory host {host!r}: {SIMULATED_VAR}={shown} is not a boolean; "
        f"write {SIMULATED_VAR}: true (a simulated node, e.g. the lab's) or false, unquoted, "
        f"in group_vars/ or host_vars/")


def _verify_io_size(host: str, value: Any) -> int | None:
    if value is None or value == "":
        return None
    from provisioner.errors import UsageError
    from provisioner.validate import check_io_size

    try:
        return check_io_size("gds_verify_io_size", value)
    except UsageError as exc:
        raise InventoryError(f"inventory host {host!r}: {exc}; fix it in group_vars/ or "
                             f"host_vars/") from None


def load_inventory(
    source: str | os.PathLike[str], limit: str | None = None, *, with_vars: bool = True
) -> Inventory:
    """Load an Ansible inventory (file or directory) and select hosts by ``limit``.

    Raises :class:`InventoryError` for a missing or malformed inventory, a limit that matches
    no host, and any host whose name or connection variables are refused.
    """
    path = Path(source)
    if not path.exists():
        raise InventoryError(
            f"inventory {str(source)!r} does not exist; pass -i with an inventory file or "
            f"directory (for the simulated lab: inventories/lab)"
        )
    # Imported late: ansible-core is heavy and not needed by every command.
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.vars.manager import VariableManager

    init_ansible_plugins()
    loader = data_loader()
    try:
        manager = InventoryManager(loader=loader, sources=[str(path)], parse=False)
        parse_strict(manager, str(path))
    except AnsibleError as exc:
        raise InventoryError(f"inventory {str(source)!r} cannot be parsed: {exc}") from exc

    all_hosts = manager.get_hosts("all")
    if not all_hosts:
        raise InventoryError(f"inventory {str(source)!r} holds no hosts")
    if limit:
        try:
            manager.subset(limit)
            selected = manager.get_hosts("all")
        except AnsibleError as exc:
            raise InventoryError(f"--limit {limit!r}: {exc}") from exc
        if not selected:
            raise InventoryError(
                f"--limit {limit!r} matches no host of inventory {str(source)!r}; "
                f"hosts look like: {', '.join(h.name for h in all_hosts[:5])}"
            )
    else:
        selected = all_hosts

    nodes: list[Node] = []
    if with_vars:
        variables = VariableManager(loader=loader, inventory=manager)
        from ansible.template import Templar

        for host in selected:
            with facts_cleaned_only_when_present():
                hv = variables.get_vars(host=host, include_hostvars=False)
            templar = Templar(loader=loader, variables=hv)
            wanted = {k: hv[k] for k in hv if k in _CONN_VARS or k.startswith(
                ("gds_", "cuda_", "mofed_", "nvme_", "nvidia_fs_", "cufile_", "preflight_",
                 "p2pdma_", "gdsfleet_"))}
            rendered: dict[str, Any] = {}
            for key, value in wanted.items():
                try:
                    rendered[key] = template_value(templar, value)
                except AnsibleError as exc:
                    if key in _CONN_VARS or key in _NEEDED_VARS:
                        raise InventoryError(
                            f"inventory host {host.name!r}: {key} cannot be templated: {exc}"
                        ) from exc
                    # A role variable the provisioner does not use (e.g. a lookup of a file
                    # only the controller's playbook run sees): keep it as written.
                    rendered[key] = value
            groups = [g.name for g in host.get_groups() if g.name not in ("all", "ungrouped")]
            nodes.append(_node_from_vars(host.name, groups, rendered))
    else:
        for host in selected:
            groups = [g.name for g in host.get_groups() if g.name not in ("all", "ungrouped")]
            nodes.append(_node_from_vars(host.name, groups, dict(host.vars)))
    return Inventory(source=str(path), nodes=tuple(nodes), manager=manager)


# Role variables the provisioner itself reads (the rest are only passed on to Ansible).
_NEEDED_VARS = ("gds_route", "gds_target", "gds_verify_io_size", "gds_mount", "gds_nfd_features",
                SIMULATED_VAR)


SITE_TARGET_DEFAULT = "gpu_nodes"


@contextlib.contextmanager
def facts_cleaned_only_when_present() -> Iterator[None]:
    """ansible-core's ``VariableManager.get_vars`` cleans each host's cached facts with
    ``clean_facts``, which lists every connection plugin on disk each time: about half of the
    provisioner's inventory load at 2,000 hosts (cProfile of ``provisioner plan``), spent on
    hosts that have no facts (none has in a new process, unless a persistent fact cache is
    configured). For the block, facts that are empty are not cleaned (``clean_facts({})`` is
    ``{}``); any other facts are cleaned by ansible-core as before."""
    from ansible.vars import manager as ansible_vars

    real = getattr(ansible_vars, "clean_facts", None)
    if real is None:  # another ansible-core layout: nothing to skip
        yield
        return

    def clean(facts: Any) -> Any:
        return {} if isinstance(facts, Mapping) and not facts else real(facts)

    ansible_vars.clean_facts = clean
    try:
        yield
    finally:
        ansible_vars.clean_facts = real


def selection_problems(
    inventory: Inventory, target_pattern: str | None = SITE_TARGET_DEFAULT, *,
    allow_local: bool = False,
) -> list[str]:
    """What makes a selection unsafe to roll out, found before anything runs:

    * two host names with the same address and port (the same machine would be provisioned
      twice, concurrently, and recorded under two names);
    * a variable that weakens or replaces the host-key policy of the playbook runs
      (:func:`host_key_policy_problems`);
    * a selected node the site playbook does not target (``hosts: gds_target``, default
      ``gpu_nodes``): it would be planned as "provision + verify", skipped by the playbook, then
      fail in the canary's verification.

    * a selected node with ``ansible_connection: local`` (unless ``allow_local``,
      ``--allow-local-connection``): its playbooks, the site playbook and a reboot among them,
      would run on this controller itself (issue 45).

    ``target_pattern`` None skips the third check (a playbook of the operator's own).
    """
    problems: list[str] = host_key_problems(inventory)
    seen: dict[tuple[str, int], str] = {}
    same = 0
    for n in inventory.nodes:
        if n.connection == "local":  # no address: the controller itself
            continue
        key = (n.address.lower(), n.port)
        if key in seen:
            same += 1
            if same <= _SHOWN_NAMES:
                problems.append(
                    f"hosts {seen[key]!r} and {n.name!r} have the same address and port "
                    f"({n.address}:{n.port}); give each machine one inventory name"
                )
        else:
            seen[key] = n.name
    if same > _SHOWN_NAMES:
        problems.append(f"and {same - _SHOWN_NAMES:,} more host(s) with the address and port of "
                        f"another; give each machine one inventory name")
    local = [n.name for n in inventory.nodes if n.connection.strip() in LOCAL_CONNECTIONS]
    if local and not allow_local:
        problems.append(
            f"{_some(local)} ha{'s' if len(local) == 1 else 've'} ansible_connection=local: "
            f"the rollout would run its playbooks (the site playbook, a reboot) on the "
            f"machine that runs ansible-playbook (this controller, or an execution node), not "
            f"on a node; give each node its address (ansible_host, over ssh), or pass "
            f"--allow-local-connection if that machine is the one to provision (a "
            f"single-machine install, a test)")
    if target_pattern:
        targeted = _targeted(inventory, target_pattern)
        outside = [n.name for n in inventory.nodes if n.name not in targeted]
        if outside:
            problems.append(
                f"{_some(outside)} not in {target_pattern!r}, the hosts the site playbook "
                f"targets (gds_target): add them to the group, or leave them out with --limit"
            )
    return problems


_SHOWN_NAMES = 10  # an error names at most this many hosts, then how many more


def _some(names: list[str]) -> str:
    """``a, b, c`` or, past :data:`_SHOWN_NAMES`, the first ones and ``and N more``: an error
    about a 2,000-host inventory stays a line an operator can read."""
    if len(names) <= _SHOWN_NAMES:
        return ", ".join(names)
    return (f"{', '.join(names[:_SHOWN_NAMES])} and {len(names) - _SHOWN_NAMES:,} more "
            f"({len(names):,} hosts)")


def _targeted(inventory: Inventory, pattern: str) -> set[str]:
    """hosts_matching on the inventory as loaded (no second parse), the --limit ignored."""
    if inventory.manager is None:
        return hosts_matching(inventory.source, pattern)
    from ansible.errors import AnsibleError

    try:
        return {h.name for h in inventory.manager.get_hosts(pattern, ignore_limits=True,
                                                             ignore_restrictions=True)}
    except AnsibleError as exc:
        raise InventoryError(f"host pattern {pattern!r}: {exc}") from exc


def hosts_matching(source: str | os.PathLike[str], pattern: str) -> set[str]:
    """Names of the inventory's hosts that an Ansible host pattern selects."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager

    try:
        manager = InventoryManager(loader=data_loader(), sources=[str(source)], parse=False)
        parse_strict(manager, str(source))
        return {h.name for h in manager.get_hosts(pattern)}
    except AnsibleError as exc:
        raise InventoryError(f"host pattern {pattern!r}: {exc}") from exc

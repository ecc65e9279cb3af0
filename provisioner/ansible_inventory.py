"""ansible-core set up to read an inventory: strictly (a source no plugin can read is an error,
not an empty inventory), and without the work it does not need there (its routing table, the
inventory plugins that would only decline the file). Used by :mod:`provisioner.inventory`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

_PLUGINS_READY = False
_LOADER_CLASS: Any = None


def data_loader() -> Any:
    """ansible-core's ``DataLoader`` less one deep copy. ``load_from_file(cache='none')``, how
    ansible-core's yaml inventory plugin reads its file, parses the file anew and keeps it in
    no cache, yet returns a ``copy.deepcopy`` of what it parsed (the copy protects the cache
    when there is one). Nothing else holds that parse, so it is returned as parsed: the same
    values, shared within the document as YAML anchors share them (deepcopy keeps that too).
    The copy was about a third of reading a 128-host YAML inventory (cProfile; 0.2-0.4 ms of
    CPU per host on the 2-core machine, docs/performance.md). Source: ansible/ansible,
    lib/ansible/parsing/dataloader.py (``load_from_file``) and
    lib/ansible/plugins/inventory/yaml.py (``cache='none'``), tag v2.19.14; the test against
    the installed ansible-core is tests/unit/test_inventory_start.py."""
    global _LOADER_CLASS
    if _LOADER_CLASS is None:
        from ansible.parsing.dataloader import DataLoader

        class _UncopiedLoader(DataLoader):  # type: ignore[misc]
            def load_from_file(self, file_name: str, cache: str = "all", unsafe: bool = False,
                               **kwargs: Any) -> Any:
                return super().load_from_file(file_name, cache=cache,
                                              unsafe=unsafe or cache == "none", **kwargs)

        _LOADER_CLASS = _UncopiedLoader
    return _LOADER_CLASS()


def template_value(templar: Any, value: Any) -> Any:
    """``templar.template(value)``, without its cost where ``value`` cannot hold a template: a
    bool, a number, None, or a string with no ``{`` (Jinja's ``{{``, ``{%`` and ``{#`` all
    start with it) and no ``#jinja2:`` header (which may name other delimiters). ansible-core
    returns those as they are, the same object (2.16-2.19); the call was about a fifth of
    reading a 128-host inventory, 14 values per host."""
    if isinstance(value, str):
        if "{" not in value and not value.startswith("#jinja2:"):
            return value
    elif value is None or isinstance(value, (bool, int, float)):
        return value
    return templar.template(value)


def init_ansible_plugins() -> None:
    """Install ansible-core's collection loader once, as its own CLIs do at start: without it
    an inventory that uses a lookup (``lookup('ansible.builtin.file', ...)``,
    ``lookup('env', ...)``) cannot be templated outside ansible-playbook."""
    global _PLUGINS_READY
    if _PLUGINS_READY:
        return
    import importlib

    from ansible.plugins.loader import init_plugin_loader

    for name in ANSIBLE_PRELOAD:
        importlib.import_module(name)
    init_plugin_loader()
    _PLUGINS_READY = True


# ansible-core modules that reading an inventory (its builtin file plugins), its variables and
# templating them (a lookup, a filter) import, imported before the collection loader is
# installed. Once installed, the loader answers the first new ``ansible.*`` import by reading
# ansible-core's whole routing table (lib/ansible/config/ansible_builtin_runtime.yml, 376 KB of
# YAML in 2.19: 0.1 CPU-s of every verify's start) to see whether the name is redirected. None
# of these is (its ``import_redirection`` lists five other names; tests/unit/
# test_inventory_start.py checks the installed ansible-core); the modules are the same either
# way, a missing one costs only time.
ANSIBLE_PRELOAD = (
    "ansible._internal._json._profiles._inventory_legacy",  # the script plugin's
    "ansible._internal._json._profiles._legacy",
    "ansible.module_utils.common.json",
    "ansible.module_utils.six",  # the toml plugin's
    "ansible.parsing.utils.addresses",  # host_list's
    "ansible.parsing.yaml.dumper",
    "ansible.playbook.play_context",
    "ansible.plugins.cache",
    "ansible.plugins.connection",
    "ansible.plugins.doc_fragments",
    "ansible.plugins.filter",
    "ansible.plugins.inventory",
    "ansible.plugins.lookup",
    "ansible.plugins.shell",
    "ansible.plugins.test",
    "ansible.plugins.vars",
    "ansible.utils.encrypt",
    "ansible.utils.hashing",
    "ansible.utils.shlex",  # the ini plugin's
    "ansible.utils.unicode",
)


def parse_strict(manager: Any, source: str) -> None:
    """Parse sources and fail on a source no inventory plugin could read.

    Ansible only warns when it cannot parse a source and then carries on with an empty
    inventory, which later looks like 'no hosts matched'. The orchestrator refuses instead.
    """
    from ansible import constants as C

    old_unparsed, old_any = C.INVENTORY_UNPARSED_IS_FAILED, C.INVENTORY_ANY_UNPARSED_IS_FAILED
    old_enabled = C.INVENTORY_ENABLED
    C.INVENTORY_UNPARSED_IS_FAILED = True
    C.INVENTORY_ANY_UNPARSED_IS_FAILED = True
    yaml_plugin = [name for name in old_enabled if _short(name) == "yaml"]
    if _plain_yaml_file(source) and yaml_plugin:
        # A YAML inventory that names no plugin: the 'auto' plugin would read the whole file
        # only to find no 'plugin' key, before the 'yaml' plugin reads it again. The name as
        # configured ('yaml' by default): a fully qualified one makes the plugin loader read
        # ansible.builtin's routing table (see ANSIBLE_PRELOAD), a short one does not.
        C.INVENTORY_ENABLED = yaml_plugin[:1]
    else:
        only = _ini_readers(source, old_enabled, C.YAML_FILENAME_EXTENSIONS)
        if only:
            C.INVENTORY_ENABLED = only
    try:
        manager.parse_sources(cache=False)
    finally:
        C.INVENTORY_UNPARSED_IS_FAILED = old_unparsed
        C.INVENTORY_ANY_UNPARSED_IS_FAILED = old_any
        C.INVENTORY_ENABLED = old_enabled


# ansible-core's builtin inventory plugins that read a file by its name alone (verify_file)
_FILE_PLUGINS = {"host_list", "script", "auto", "yaml", "ini", "toml"}


def _ini_readers(source: str, enabled: Iterable[str], yaml_exts: Iterable[str]) -> list[str]:
    """The enabled plugins that can read ``source`` when it is an INI-style file and only
    ansible-core's file plugins are enabled (the default): ``ini`` for a file whose extension
    is neither YAML's (``yaml_extensions``) nor ``.toml``, ``yaml`` then ``ini`` for one
    without an extension; [] when that cannot be told (a script, a directory, a custom
    plugin enabled). The others would only decline it (``verify_file``), after being loaded:
    the ``script`` plugin's import and the ``auto`` plugin's routing lookups were 0.2-0.3
    CPU-s of each INI inventory read."""
    enabled = list(enabled)
    if not enabled or not _plugin_names(enabled) <= _FILE_PLUGINS:
        return []
    if not os.path.isfile(source) or os.access(source, os.X_OK):
        return []
    ext = os.path.splitext(source)[1]
    if ext in (".toml", *yaml_exts):
        return []
    wanted = {"ini"} if ext else {"yaml", "ini"}
    return [name for name in enabled if _short(name) in wanted]


# a key named plugin anywhere: block style at any indentation, or in a flow mapping
_PLUGIN_KEY = re.compile(r"""(^|[{,])\s*["']?plugin["']?\s*:""", re.MULTILINE)


def _short(name: str) -> str:
    """A plugin's name without its collection (``ansible.builtin.ini`` -> ``ini``)."""
    return name.rsplit(".", 1)[-1]


def _plugin_names(enabled: Iterable[str]) -> set[str]:
    return {_short(name) for name in enabled}


def _plain_yaml_file(source: str) -> bool:
    """A .yml/.yaml file with no ``plugin:`` key anywhere (so not an inventory plugin's
    config): only the ``yaml`` inventory plugin can read it."""
    if not source.endswith((".yml", ".yaml")) or not os.path.isfile(source):
        return False
    try:
        with open(source, encoding="utf-8", errors="replace") as fh:
            return _PLUGIN_KEY.search(fh.read()) is None
    except OSError:
        return False

"""Pure parsers: raw command output or file text in, plain data out. No I/O, no SSH.

Each module documents the command or file it reads. The tests feed them captured outputs
from tests/fixtures/ (``{command, output, expected}``).
"""

from __future__ import annotations

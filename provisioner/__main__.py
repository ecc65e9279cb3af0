"""``python -m provisioner``: the same as the ``provisioner`` command."""

from __future__ import annotations

import sys

from provisioner.cli import console_main

if __name__ == "__main__":
    sys.exit(console_main())

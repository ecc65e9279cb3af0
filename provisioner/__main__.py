"""``python -m provisioner``: the same as the ``provisioner`` command."""

from __future__ import annotations

import sys

from provisioner.cli import main

if __name__ == "__main__":
    sys.exit(main())

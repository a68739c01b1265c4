"""The primary Python file that spark-submit runs (see ../spark-submit.sh).

    spark-submit --py-files build/dist/deltanode-<version>.zip app/main.py SUBCOMMAND --conf FILE

When the deltanode archive is on sys.path (--py-files puts it there), the package is imported
from it, so the driver runs exactly the code the executors get; run directly
(``python app/main.py ...``) it uses the sources beside this file.
"""

import os
import sys


def _prefer_archive() -> None:
    here = os.path.dirname(os.path.realpath(__file__))
    archives = [p for p in sys.path
                if p.endswith(".zip") and os.path.basename(p).startswith("deltanode-")]
    if archives:
        sys.path[:] = [p for p in sys.path if not p or os.path.realpath(p) != here]
    elif here not in sys.path:
        sys.path.insert(0, here)


_prefer_archive()

from deltanode.cli import main  # noqa: E402
from deltanode.lifeline import exit_with_launcher, exit_with_parent  # noqa: E402

if __name__ == "__main__":
    exit_with_parent()
    exit_with_launcher()
    sys.exit(main())

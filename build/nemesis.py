#!/usr/bin/env python3
"""A nemesis run: see ``build/nemesis.py --help`` and build/deltanode_nemesis/."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "app"), os.path.join(ROOT, "build"), ROOT]

from deltanode_nemesis.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

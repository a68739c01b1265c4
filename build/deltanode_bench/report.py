"""Pure formatting helpers for the benchmark's tables."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence

MB = 1e6
MIB = float(1 << 20)


def mb(nbytes: float) -> str:
    return f"{nbytes / MB:.1f}"


def mib(nbytes: float) -> str:
    return f"{nbytes / MIB:.0f}"


def secs(s: float | None, digits: int = 2) -> str:
    return "-" if s is None else f"{s:.{digits}f}"


def rate(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _numeric(cell: str) -> bool:
    c = cell.replace(",", "").replace("x", "").replace("%", "").strip()
    try:
        float(c)
        return True
    except ValueError:
        return c == "-"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> str:
    """Columns padded to their widest cell; numeric columns right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    ncol = len(headers)
    if any(len(r) != ncol for r in cells):
        raise ValueError("every row needs one cell per header")
    widths = [max(len(r[i]) for r in cells) for i in range(ncol)]
    right = [all(_numeric(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(ncol)]
    lines = []
    for n, r in enumerate(cells):
        parts = [r[i].rjust(widths[i]) if right[i] else r[i].ljust(widths[i]) for i in range(ncol)]
        lines.append(indent + "  ".join(parts).rstrip())
        if n == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def short_channel(vchannel: str) -> str:
    """``bench123-rootcoord-dml_0_123v0`` -> ``v0``."""
    tail = vchannel.rsplit("v", 1)
    return f"v{tail[1]}" if len(tail) == 2 and tail[1].isdigit() else vchannel


def machine_info() -> dict[str, str]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "unknown"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / (1 << 20):.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return {"nproc": str(len(os.sched_getaffinity(0))), "cpu": cpu, "memory": mem, "loadavg": load,
            "python": platform.python_version()}


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "NOT met")

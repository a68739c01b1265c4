"""Where the ``sql`` subcommand's rows go: this process's stdout, for them alone (driver).

The JVM that pyspark starts inherits the process's stdout, and Spark, the JVM and Python
libraries may print there. So the stdout a user pipes is taken aside before the JVM starts, and
file descriptor 1 is pointed at stderr: anything printed afterwards, by anyone, lands on stderr;
only the rows are written to the stdout taken aside.
"""

from __future__ import annotations

import os


class ResultStream:
    """The process's stdout, kept for result rows (runs on the driver): open it before the JVM
    starts, close it at the end (stdout is then file descriptor 1 again)."""

    def __init__(self) -> None:
        self._fd = os.dup(1)
        os.dup2(2, 1)
        self._out = open(self._fd, "wb", buffering=1 << 16, closefd=False)

    def write(self, line: bytes) -> None:
        self._out.write(line)

    def close(self) -> None:
        """Flush the rows (``BrokenPipeError`` when the reader went away) and give stdout back."""
        try:
            self._out.flush()
        finally:
            try:
                self._out.close()
            except BrokenPipeError:
                pass
            os.dup2(self._fd, 1)
            os.close(self._fd)

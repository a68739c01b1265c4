"""The JVM components ``build/bootstrap.sh`` fetched from Maven Central (runs on the driver).

``build/jvm_components.py`` puts each component's jars in ``share/deltanode/jars/NAME/`` of the
venv (``kafka`` and ``pulsar``: the embedded brokers; ``delta``: Delta Lake for Spark; ``s3a``:
Hadoop's S3A connector, for Spark to read tables on S3; ``yarn``: the single-node YARN of the
tests). Nothing is fetched at run time: a missing component is an
error that says to run bootstrap.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..failure.errors import DeltaNodeError
from ..failure.kinds import FailureKind


class MissingJars(DeltaNodeError):
    """A JVM component was never fetched into this venv."""

    kind = FailureKind.BAD_CONF


def component_dir(name: str) -> Path:
    """Where bootstrap puts component ``name``: in the venv of this interpreter."""
    return Path(sys.prefix) / "share" / "deltanode" / "jars" / name


def component_jars(name: str) -> list[Path]:
    """The jars of component ``name``, sorted; ``MissingJars`` when bootstrap has not fetched it."""
    jars = sorted(component_dir(name).glob("*.jar"))
    if not jars:
        raise MissingJars(f"the {name} jars are not in {component_dir(name)}: run build/bootstrap.sh "
                          f"(it fetches them from Maven Central once, build/jvm_components.py)")
    return jars

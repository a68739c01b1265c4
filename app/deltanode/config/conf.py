"""``Conf``: the typed, validated configuration, built from a file and the environment (``load_conf``)
or from a mapping (``Conf.from_dict``)."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .checks import check_cross
from .keys import (
    KAFKA_CLIENT_PREFIX,
    KAFKA_RESERVED,
    KEYS,
    PASSTHROUGH_PREFIXES,
    SPARK_PREFIX,
    env_name,
    is_secret,
    unknown_key_msg,
)
from .sources import env_entries, read_file, read_secret_files
from .values import ConfError, KeyType, parse_hostports


class Conf:
    """Typed, validated configuration. Build it with ``load_conf`` or ``Conf.from_dict``."""

    def __init__(self, values: Mapping[str, Any], raw: Mapping[str, str],
                 sources: Mapping[str, str], passthrough: Mapping[str, str],
                 path: str | None, base_dir: Path) -> None:
        self._values = dict(values)
        self._raw = dict(raw)
        self._sources = dict(sources)
        self._passthrough = dict(passthrough)   # spark.* and mq.kafka.* keys, as written
        self.path = path
        self.base_dir = base_dir

    # -- lookup
    def get(self, key: str) -> Any:
        """The typed value of a known key (None if it has none), or a passed-through value (None if unset)."""
        if key in KEYS:
            return self._values.get(key)
        if key.startswith(PASSTHROUGH_PREFIXES):
            return self._passthrough.get(key)
        raise KeyError(unknown_key_msg(key))

    __getitem__ = get

    def __contains__(self, key: str) -> bool:
        return (key in KEYS and self._values.get(key) is not None) or key in self._passthrough

    def raw(self, key: str) -> str | None:
        """The text the value was parsed from."""
        if key.startswith(PASSTHROUGH_PREFIXES) and key not in KEYS:
            return self._passthrough.get(key)
        self.get(key)
        return self._raw.get(key)

    def source(self, key: str) -> str:
        """``"conf/x.conf:12"``, ``"env DELTANODE_X"``, ``"default"`` (or ``"unset"``)."""
        self.get(key)
        return self._sources.get(key, "unset")

    def spark_conf(self) -> dict[str, str]:
        """Every spark.* key, untouched, in file order."""
        return {k: v for k, v in self._passthrough.items() if k.startswith(SPARK_PREFIX)}

    def kafka_client_conf(self) -> dict[str, str]:
        """The librdkafka properties of the ``mq.kafka.*`` keys (prefix removed)."""
        return {k[len(KAFKA_CLIENT_PREFIX):]: v for k, v in self._passthrough.items()
                if k.startswith(KAFKA_CLIENT_PREFIX)}

    @property
    def broker_key(self) -> str:
        """The key that names the broker of ``mq.type``."""
        return "mq.pulsar.service.url" if self.get("mq.type") == "pulsar" else "mq.kafka.bootstrap.servers"

    def broker_hostports(self) -> list[tuple[str, int]]:
        """The broker's ``[(host, port), ...]``, whatever ``mq.type``."""
        if self.get("mq.type") == "pulsar":
            url = urllib.parse.urlsplit(self.get("mq.pulsar.service.url"))
            return [(url.hostname or "", url.port or 6650)]
        return self.hostports("mq.kafka.bootstrap.servers")

    def hostports(self, key: str) -> list[tuple[str, int]]:
        """``etcd.endpoints`` / ``mq.kafka.bootstrap.servers`` as ``[(host, port), ...]``."""
        return parse_hostports(self.get(key))

    def to_dict(self) -> dict[str, Any]:
        """All known keys (typed) followed by the passed-through keys."""
        out = {k: self._values.get(k) for k in KEYS}
        out.update(self._passthrough)
        return out

    def with_overrides(self, overrides: Mapping[str, Any]) -> Conf:
        """A copy with some keys replaced (values as in a file, or plain Python values)."""
        entries = {k: (self._raw[k], self._sources[k]) for k in self._raw
                   if self._sources.get(k) != "default"}
        entries.update({k: (v, self._sources[k]) for k, v in self._passthrough.items()})
        for k, v in overrides.items():
            entries[k] = (_to_text(v), "override")
        return _build(entries, self.path or "<code>", self.base_dir, self.path)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, base_dir: str | Path | None = None) -> Conf:
        """A Conf from a mapping (strings as in a file, or bool/int/float); for tests and tools."""
        base = Path(base_dir) if base_dir is not None else Path.cwd()
        return _build({k: (_to_text(v), "code") for k, v in values.items()}, "<code>", base, None)

    def describe(self) -> str:
        """``key = value  # source`` lines, for --print-conf; secret values show as ``****``."""
        lines = []
        for k, spec in KEYS.items():
            raw = self._raw.get(k)
            if spec.type in (KeyType.PATH, KeyType.LOCALPATH) and raw is not None:
                raw = self._values[k]
            lines.append(f"{k} = {'' if raw is None else _masked(k, raw)}  # {self._sources.get(k, 'unset')}")
        for k, v in self._passthrough.items():
            lines.append(f"{k} = {_masked(k, v)}  # {self._sources[k]}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        shown = {k: "****" if v is not None and is_secret(k) else v for k, v in self.to_dict().items()}
        return f"Conf(path={self.path!r}, {shown!r})"


def _masked(key: str, value: str) -> str:
    return "****" if value and is_secret(key) else value


def _to_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _build(entries: Mapping[str, tuple[str, str]], display: str, base_dir: Path,
           path: str | None) -> Conf:
    entries = read_secret_files(entries, base_dir)
    values: dict[str, Any] = {}
    raw: dict[str, str] = {}
    sources: dict[str, str] = {}
    passthrough: dict[str, str] = {}
    for key, (text, where) in entries.items():
        if key in KEYS:
            continue
        if not key.startswith(PASSTHROUGH_PREFIXES):
            raise ConfError(f"{where}: {unknown_key_msg(key)}")
        prop = key[len(KAFKA_CLIENT_PREFIX):]
        if key.startswith(KAFKA_CLIENT_PREFIX) and prop in KAFKA_RESERVED:
            raise ConfError(f"{where}: {key!r} cannot be set: {KAFKA_RESERVED[prop]}")
        passthrough[key] = text
        sources[key] = where
    for key, spec in KEYS.items():
        if key in entries:
            text, where = entries[key]
        elif spec.required:
            raise ConfError(f"{display}: missing required key {key!r} "
                            f"(set it in the file or with {env_name(key)})")
        elif spec.default is None:
            continue
        else:
            text, where = spec.default, "default"
        try:
            values[key] = spec.parse(text, base_dir)
        except ValueError as e:
            raise ConfError(f"{where}: bad value for {key!r}: {e}") from None
        raw[key] = text
        sources[key] = where
    conf = Conf(values, raw, sources, passthrough, path, base_dir)
    check_cross(conf)
    return conf


def load_conf(path: str | os.PathLike, env: Mapping[str, str] | None = None, *,
              base_dir: str | os.PathLike | None = None) -> Conf:
    """Read and validate a conf file, then apply ``DELTANODE_*`` overrides from ``env``.

    ``env`` defaults to ``os.environ``; ``base_dir`` (relative paths) to the working directory.
    Raises ConfError naming the key, the file and the line (or the variable).
    """
    env = os.environ if env is None else env
    display = os.fspath(path)
    entries = read_file(Path(path), display)
    passthrough_in_file = [k for k in entries if k.startswith(PASSTHROUGH_PREFIXES)]
    entries.update(env_entries(env, passthrough_in_file))
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    return _build(entries, display, base, display)

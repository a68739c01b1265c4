"""How a conf value's text becomes a typed value: the parsers, the key types and ``Key``."""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..failure.errors import BadInput
from ..failure.kinds import FailureKind


class ConfError(BadInput):
    """A configuration problem; the message names the key and where it was set."""

    kind = FailureKind.BAD_CONF


_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b)?$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(us|ms|s|sec|m|min|h|d)?$", re.IGNORECASE)
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0,
                   "min": 60.0, "h": 3600.0, "d": 86400.0}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def parse_size(text: str) -> int:
    """Bytes from ``"64m"``, ``"256MiB"``, ``"1.5g"``, ``"4096"`` (1k = 1024 bytes)."""
    m = _SIZE_RE.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a size (examples: 4096, 64k, 256m, 1g)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def parse_duration(text: str) -> float:
    """Seconds from ``"1s"``, ``"500ms"``, ``"5m"``, ``"2h"``, ``"1d"``; a bare number is seconds."""
    m = _DURATION_RE.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration (examples: 500ms, 1s, 5m, 2h)")
    unit = m.group(2).lower() if m.group(2) else None
    return float(m.group(1)) * _DURATION_UNITS[unit]


def parse_bool(text: str) -> bool:
    t = str(text).strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean (use true or false)")


def parse_hostports(text: str) -> list[tuple[str, int]]:
    """``"h1:2379,h2:2379"`` -> ``[("h1", 2379), ("h2", 2379)]``; an ``http://`` prefix is allowed."""
    out = []
    for part in str(text).split(","):
        item = part.strip()
        item = re.sub(r"^[A-Za-z][A-Za-z0-9+.\-]*://", "", item).rstrip("/")
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{part.strip()!r} is not host:port")
        out.append((host, int(port)))
    return out


def _parse_int(text: str) -> int:
    try:
        return int(str(text).strip().replace("_", ""))
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def _parse_float(text: str) -> float:
    try:
        return float(str(text).strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None


class KeyType(enum.StrEnum):
    """How a key's text is parsed (and shown in the key table)."""

    STR = "str"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    SIZE = "size"              # 64m, 1g: bytes
    DURATION = "duration"      # 1s, 500ms: seconds
    ENUM = "enum"              # one of ``Key.choices``
    PATH = "path"              # a local path (resolved against the conf file's folder) or a URI
    LOCALPATH = "localpath"    # a local path only
    HOSTPORTS = "hostports"    # host:port[,host:port]
    URL = "url"                # a URL with one of ``Key.schemes``


@dataclass(frozen=True)
class Key:
    """One known key. ``default`` is text, parsed like a file value; None with required=False
    means the key has no value unless set."""

    name: str
    type: KeyType
    default: str | None
    doc: str
    required: bool = False
    choices: tuple[str, ...] = ()
    min: float | None = None
    schemes: tuple[str, ...] = ()

    def parse(self, raw: str, base_dir: Path) -> Any:
        """The typed value of ``raw``; raises ValueError with a short reason."""
        text = raw.strip()
        if text == "":
            raise ValueError("the value is empty")
        t = self.type
        if t == KeyType.STR:
            value: Any = text
        elif t == KeyType.INT:
            value = _parse_int(text)
        elif t == KeyType.FLOAT:
            value = _parse_float(text)
        elif t == KeyType.BOOL:
            value = parse_bool(text)
        elif t == KeyType.SIZE:
            value = parse_size(text)
        elif t == KeyType.DURATION:
            value = parse_duration(text)
        elif t == KeyType.ENUM:
            for choice in self.choices:
                if text.lower() == choice.lower():
                    return choice
            raise ValueError(f"{text!r} is not one of {' | '.join(self.choices)}")
        elif t in (KeyType.PATH, KeyType.LOCALPATH):
            if _URI_RE.match(text):
                if t == KeyType.PATH:
                    return text
                if not text.startswith("file://"):
                    raise ValueError(f"{text!r} must be a local directory, not a URI")
                text = text[len("file://"):]
            p = Path(os.path.expanduser(text))
            return str(p if p.is_absolute() else (base_dir / p).resolve())
        elif t == KeyType.HOSTPORTS:
            parse_hostports(text)
            return ",".join(p.strip() for p in text.split(","))
        elif t == KeyType.URL:
            scheme = text.split("://", 1)[0] if "://" in text else ""
            if scheme not in self.schemes or not text.split("://", 1)[1]:
                raise ValueError(f"{text!r} is not a URL starting with "
                                 + " or ".join(s + "://" for s in self.schemes))
            return text
        else:  # pragma: no cover - table error
            raise AssertionError(f"unknown key type {t}")
        if self.min is not None and value < self.min:
            unit = {KeyType.SIZE: " bytes", KeyType.DURATION: " s"}.get(t, "")
            raise ValueError(f"{text!r} is below the minimum {self.min:g}{unit}")
        return value

    @property
    def type_doc(self) -> str:
        if self.type == KeyType.ENUM:
            return " | ".join(self.choices)
        return {KeyType.SIZE: "size (64m)", KeyType.DURATION: "duration (1s, 500ms)",
                KeyType.HOSTPORTS: "host:port[,host:port]", KeyType.PATH: "path or URI",
                KeyType.LOCALPATH: "local path"}.get(self.type, str(self.type))

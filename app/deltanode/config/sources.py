"""Where conf values come from: the ``key = value`` file, ``DELTANODE_*`` variables, and the files
``<key>.file`` names for secrets. Each gives ``{key: (raw text, where it was set)}``."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from .keys import (
    COMMON_SPARK_KEYS,
    ENV_PREFIX,
    INTERNAL_VARIABLES,
    KAFKA_CLIENT_PREFIX,
    KEYS,
    PASSTHROUGH_PREFIXES,
    REMOVED_KEYS,
    SECRET_FILE_SUFFIX,
    env_name,
    is_secret,
    unknown_key_msg,
)
from .values import ConfError

_KEY_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def secret_of_file_key(key: str) -> str | None:
    """The secret key a ``<key>.file`` key gives the file of, or None when ``key`` is no such key."""
    if not key.endswith(SECRET_FILE_SUFFIX):
        return None
    stem = key[:-len(SECRET_FILE_SUFFIX)]
    return stem if (stem in KEYS or stem.startswith(KAFKA_CLIENT_PREFIX)) and is_secret(stem) else None


def _strip_value(value: str, spark: bool) -> str:
    value = re.sub(r"\s+#.*$", "", value).strip()
    if not spark and len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value


def read_file(path: Path, display: str) -> dict[str, tuple[str, str]]:
    """``{key: (raw value, "file:line")}`` from a conf file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfError(f"{display}: conf file not found") from None
    except OSError as e:
        raise ConfError(f"{display}: cannot read the conf file: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfError(f"{display}: the conf file is not UTF-8 text") from None
    entries: dict[str, tuple[str, str]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{display}:{lineno}"
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        key = key.strip()
        if not sep or not key or not _KEY_RE.match(key):
            raise ConfError(f"{where}: malformed line {stripped[:60]!r} (expected 'key = value')")
        if key in entries:
            raise ConfError(f"{where}: key {key!r} is set twice (first at {entries[key][1]})")
        if key not in KEYS and not key.startswith(PASSTHROUGH_PREFIXES) and secret_of_file_key(key) is None:
            raise ConfError(f"{where}: {unknown_key_msg(key)}")
        entries[key] = (_strip_value(value, key.startswith(PASSTHROUGH_PREFIXES) and key not in KEYS), where)
    return entries


def env_entries(env: Mapping[str, str], passthrough_keys: Iterable[str]) -> dict[str, tuple[str, str]]:
    known = {env_name(k): k for k in KEYS}
    known.update({env_name(k + SECRET_FILE_SUFFIX): k + SECRET_FILE_SUFFIX for k in KEYS if is_secret(k)})
    spark_names = {env_name(k): k for k in (*COMMON_SPARK_KEYS, *passthrough_keys)}
    out: dict[str, tuple[str, str]] = {}
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX) or var in INTERNAL_VARIABLES:
            continue
        value = env[var]
        if value == "":
            continue
        where = f"env {var}"
        if var in known:
            out[known[var]] = (_strip_value(value, False), where)
        elif var in spark_names:
            out[spark_names[var]] = (value, where)
        elif var.startswith((ENV_PREFIX + "SPARK_", ENV_PREFIX + "MQ_KAFKA_")) and not var.endswith("_"):
            out[var[len(ENV_PREFIX):].lower().replace("_", ".")] = (value, where)
        elif var in {env_name(k) for k in REMOVED_KEYS}:
            key = next(k for k in REMOVED_KEYS if env_name(k) == var)
            raise ConfError(f"{where}: {unknown_key_msg(key)}")
        else:
            msg = (f"{where}: unknown variable; {ENV_PREFIX}* variables override conf keys, "
                   f"e.g. {env_name('storage.root')} for 'storage.root'")
            guess = difflib.get_close_matches(var, list(known), n=1, cutoff=0.7)
            if guess:
                msg += f" (did you mean {guess[0]}?)"
            raise ConfError(msg)
    return out

def read_secret_files(entries: Mapping[str, tuple[str, str]], base_dir: Path) -> dict[str, tuple[str, str]]:
    """``entries`` with each ``<key>.file`` replaced by ``<key>`` and the content of the file it names.
    A key set both ways is an error, unless one of the two comes from the environment, which wins."""
    out = dict(entries)
    for key, (text, where) in entries.items():
        secret = secret_of_file_key(key)
        if secret is None:
            continue
        del out[key]
        if secret in entries:
            other = entries[secret][1]
            if other.startswith("env ") != where.startswith("env "):
                if where.startswith("env "):
                    out[secret] = _secret_from_file(secret, text, where, base_dir)
                continue
            raise ConfError(f"{where}: {key!r} and {secret!r} ({other}) are both set: keep one")
        out[secret] = _secret_from_file(secret, text, where, base_dir)
    return out


def _secret_from_file(key: str, text: str, where: str, base_dir: Path) -> tuple[str, str]:
    path = Path(os.path.expanduser(text.strip()))
    path = path if path.is_absolute() else base_dir / path
    try:
        value = path.read_text(encoding="utf-8").rstrip("\r\n")   # an editor's last newline is not the secret's
    except OSError as e:
        raise ConfError(f"{where}: cannot read the file of {key!r}, {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfError(f"{where}: the file of {key!r}, {path}, is not UTF-8 text") from None
    if not value:
        raise ConfError(f"{where}: the file of {key!r}, {path}, is empty")
    return value, f"{where} (file {path})"

"""Parsing of the ``etcd.endpoints`` setting, shared by the gRPC client and the HTTP fence."""

from __future__ import annotations


def parse_endpoints(endpoints: str) -> list[tuple[str, int]]:
    """``"h1:2379,http://h2:2379"`` -> ``[("h1", 2379), ("h2", 2379)]``, in the given order.

    An ``http://`` or ``https://`` prefix is dropped: whether a connection is TLS is ``etcd.ssl.enabled``'s
    to say (config checks that an ``https://`` endpoint comes with it), as Milvus's etcd.ssl does.
    """
    parsed = []
    for item in endpoints.split(","):
        item = item.strip().rstrip("/")
        if not item:
            continue
        item = item.removeprefix("http://").removeprefix("https://")
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"etcd endpoint {item!r} is not of the form host:port")
        parsed.append((host, int(port)))
    if not parsed:
        raise ValueError(f"no etcd endpoint in {endpoints!r}")
    return parsed

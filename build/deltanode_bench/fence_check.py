"""What the commit fence's ownership check costs the driver, by the number of vchannels a node holds.

``PYTHONPATH=app .venv/bin/python -m deltanode_bench.fence_check [--vchannels 1000,10000]``
starts an etcd of its own (a scratch directory), writes a node's session and one watch key per
vchannel (a ChannelWatchInfo in state WatchSuccess with its VchannelInfo and a two-field schema,
about the size the channel manager writes), then runs ``OwnershipFence.check`` for a quarter of
them, as a cycle's sync does: the first check reads every watch key, the next ones only those
modified since and the key count. Prints the CPU and wall milliseconds of the first check and
the median of the next ones.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from pymilvus.grpc_gen import schema_pb2

from deltanode.etcd import keys
from deltanode.etcd.client import EtcdClient
from deltanode.etcd.fence import OwnershipFence
from deltanode.standalone.services import EmbeddedEtcd
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState, VchannelInfo

ROOT, NODE, LATER_CHECKS = "by-dev/meta", 1, 7


def watch_value(vchannel: str, collection_id: int) -> bytes:
    schema = schema_pb2.CollectionSchema(name=f"c{collection_id}", fields=[
        schema_pb2.FieldSchema(fieldID=100, name="pk", data_type=schema_pb2.DataType.Int64, is_primary_key=True),
        schema_pb2.FieldSchema(fieldID=101, name="vector", data_type=schema_pb2.DataType.FloatVector,
                               type_params=[{"key": "dim", "value": "128"}])])
    return ChannelWatchInfo(vchan=VchannelInfo(collectionID=collection_id, channelName=vchannel), schema=schema,
                            state=ChannelWatchState.WatchSuccess, opID=1, startTs=int(time.time())).SerializeToString()


def timed(fence: OwnershipFence, vchannels: list[str]) -> tuple[float, float]:
    """(CPU ms, wall ms) of one check; every vchannel must pass."""
    cpu, wall = time.process_time(), time.perf_counter()
    lost = fence.check(vchannels)
    cpu, wall = (time.process_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3
    if lost:
        raise SystemExit(f"the fence refused {len(lost)} vchannel(s), e.g. {next(iter(lost.items()))}")
    return cpu, wall


def measure(client: EtcdClient, endpoint: str, count: int) -> tuple[tuple[float, float], tuple[float, float]]:
    node = NODE + count   # a node of its own per point: its prefix holds exactly ``count`` keys
    client.put(keys.session_key(ROOT, "datanode", node), b"{}")
    vchannels = [f"by-dev-rootcoord-dml_{i % 16}_{470718251077200000 + i // 2}v{i % 2}" for i in range(count)]
    items = [(keys.channel_watch_key(ROOT, node, v), watch_value(v, 470718251077200000 + i // 2))
             for i, v in enumerate(vchannels)]
    for i in range(0, len(items), 64):
        client.put_all_if_absent(dict(items[i:i + 64]))
    fence = OwnershipFence(endpoint, ROOT, node, timeout=5.0)
    syncing = vchannels[::4]
    first = timed(fence, syncing)
    later = [timed(fence, syncing) for _ in range(LATER_CHECKS)]
    return first, (statistics.median(c for c, _ in later), statistics.median(w for _, w in later))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deltanode_bench.fence_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--vchannels", default="1000,10000", help="comma-separated node sizes (default: %(default)s)")
    args = p.parse_args(argv)
    counts = [int(n) for n in args.vchannels.split(",")]
    with tempfile.TemporaryDirectory(prefix="deltanode-fence-") as scratch, EmbeddedEtcd(scratch) as etcd:
        client = EtcdClient(etcd.endpoint)
        try:
            rows = [(n, *measure(client, etcd.endpoint, n)) for n in counts]
        finally:
            client.close()
    print("Fence check of a quarter of a node's vchannels (ms; later = median of the next "
          f"{LATER_CHECKS}, nothing changed between them)")
    print(f"  {'vchannels':>9}  {'first CPU':>9}  {'first wall':>10}  {'later CPU':>9}  {'later wall':>10}")
    print(f"  {'-' * 9}  {'-' * 9}  {'-' * 10}  {'-' * 9}  {'-' * 10}")
    for n, (c1, w1), (c2, w2) in rows:
        print(f"  {n:>9,}  {c1:>9.1f}  {w1:>10.1f}  {c2:>9.1f}  {w2:>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

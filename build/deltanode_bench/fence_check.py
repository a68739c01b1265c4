"""What the commit fence's ownership check costs the driver, by the number of vchannels a node holds.

``PYTHONPATH=app .venv/bin/python -m deltanode_bench.fence_check [--vchannels 1000,10000]``
starts an etcd of its own (a scratch directory), writes a node's session and one watch key per
vchannel (a ChannelWatchInfo in state WatchSuccess with its VchannelInfo and a two-field schema,
about the size the channel manager writes), then runs ``OwnershipFence.check`` for a quarter of
them, as a cycle's sync does: the first check reads every watch key; the next ones, with a
write elsewhere in etcd before each, only the keys modified since and the key count; then, with
nothing written between them, the session key alone. Prints the driver's CPU, the wall clock and
etcd's CPU (milliseconds) of the first check and the medians of the next ones.
"""

from __future__ import annotations

import argparse
import os
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
Timing = tuple[float, float, float]   # driver CPU, wall, etcd CPU (ms)


def watch_value(vchannel: str, collection_id: int) -> bytes:
    schema = schema_pb2.CollectionSchema(name=f"c{collection_id}", fields=[
        schema_pb2.FieldSchema(fieldID=100, name="pk", data_type=schema_pb2.DataType.Int64, is_primary_key=True),
        schema_pb2.FieldSchema(fieldID=101, name="vector", data_type=schema_pb2.DataType.FloatVector,
                               type_params=[{"key": "dim", "value": "128"}])])
    return ChannelWatchInfo(vchan=VchannelInfo(collectionID=collection_id, channelName=vchannel), schema=schema,
                            state=ChannelWatchState.WatchSuccess, opID=1, startTs=int(time.time())).SerializeToString()


def process_cpu_ms(pid: int) -> float:
    """A process's user + system CPU so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e3 / os.sysconf("SC_CLK_TCK")


def timed(fence: OwnershipFence, vchannels: list[str], etcd_pid: int) -> Timing:
    """One check; every vchannel must pass."""
    etcd, cpu, wall = process_cpu_ms(etcd_pid), time.process_time(), time.perf_counter()
    lost = fence.check(vchannels)
    cpu, wall = (time.process_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3
    if lost:
        raise SystemExit(f"the fence refused {len(lost)} vchannel(s), e.g. {next(iter(lost.items()))}")
    return cpu, wall, process_cpu_ms(etcd_pid) - etcd


def medians(timings: list[Timing]) -> Timing:
    return statistics.median(t[0] for t in timings), statistics.median(t[1] for t in timings), \
        statistics.median(t[2] for t in timings)


def measure(client: EtcdClient, endpoint: str, etcd_pid: int, count: int) -> tuple[Timing, Timing, Timing]:
    """The first check, the next ones with a write between them, then the next ones without."""
    node = NODE + count   # a node of its own per point: its prefix holds exactly ``count`` keys
    client.put(keys.session_key(ROOT, "datanode", node), b"{}")
    vchannels = [f"by-dev-rootcoord-dml_{i % 16}_{470718251077200000 + i // 2}v{i % 2}" for i in range(count)]
    items = [(keys.channel_watch_key(ROOT, node, v), watch_value(v, 470718251077200000 + i // 2))
             for i, v in enumerate(vchannels)]
    for i in range(0, len(items), 64):
        client.put_all_if_absent(dict(items[i:i + 64]))
    fence = OwnershipFence(endpoint, ROOT, node, timeout=5.0)
    syncing = vchannels[::4]
    first = timed(fence, syncing, etcd_pid)
    written = []
    for i in range(LATER_CHECKS):
        client.put(f"{ROOT}/elsewhere", str(i).encode())   # the store's revision moves, no watch key
        written.append(timed(fence, syncing, etcd_pid))
    quiet = [timed(fence, syncing, etcd_pid) for _ in range(LATER_CHECKS)]
    return first, medians(written), medians(quiet[1:])   # the first quiet one still reads what changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deltanode_bench.fence_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--vchannels", default="1000,10000", help="comma-separated node sizes (default: %(default)s)")
    args = p.parse_args(argv)
    counts = [int(n) for n in args.vchannels.split(",")]
    with tempfile.TemporaryDirectory(prefix="deltanode-fence-") as scratch, EmbeddedEtcd(scratch) as etcd:
        assert etcd.proc is not None   # started by the context manager
        client = EtcdClient(etcd.endpoint)
        try:
            rows = [(n, *measure(client, etcd.endpoint, etcd.proc.pid, n)) for n in counts]
        finally:
            client.close()
    print(f"Fence check of a quarter of a node's vchannels (ms; medians of {LATER_CHECKS} checks after the "
          "first, with a write elsewhere in etcd before each, then with nothing written)")
    columns = [f"{when} {what}" for when in ("first", "written", "quiet") for what in ("CPU", "wall", "etcd")]
    print(f"  {'vchannels':>9}  " + "  ".join(f"{c:>12}" for c in columns))
    print(f"  {'-' * 9}  " + "  ".join("-" * 12 for _ in columns))
    for n, *timings in rows:
        print(f"  {n:>9,}  " + "  ".join(f"{v:>12.1f}" for t in timings for v in t))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``--storage s3``: the storage root in a bucket of the tests' S3 server (moto, one request at a
time: ``tests/integration/s3_server.py``) that the nodes reach through the tests' fault proxy
(``tests/integration/s3_fault_proxy.py``), and its fault ``s3-errors``: for the hold, rules drawn
from the seed break requests at random: answers lost after S3 stored a PUT (data files, multipart
completions and commits: the client cannot tell its write landed), 503s, connection resets before
and after S3 acted, slow answers, refused log reads. The heal clears the rules. The checks read the
bucket directly, not through the proxy. Runs in the nemesis process."""

from __future__ import annotations

import collections
import importlib.metadata
import random
import subprocess
import sys
import time
from pathlib import Path

from deltanode.delta.layout import StorageLayout
from deltanode.delta.object_store import StoreOptions
from deltanode.standalone.services import free_port
from tests.integration.s3_fault_proxy import Fault, Rule, S3FaultProxy

from .kinds import FaultKind, StorageMode
from .storage import StorageRoot

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "deltanode"
PREFIX = "nemesis"
COMMIT = r"/_delta_log/\d{20}\.json$"
DATA = r"\.parquet$"
# Every s3-errors fault loses answers to stored PUTs, of commits and of data files (the fault that
# lost data before the commit protocol read versions back), and draws some of the others.
ALWAYS = (("commit lost answer", Fault.LOST_ANSWER, "PUT", COMMIT, ""),
          ("data lost answer", Fault.LOST_ANSWER, "PUT", DATA, ""))
SOME = (("data upload completed, answer lost", Fault.LOST_ANSWER, "POST", DATA, "uploadId="),
        ("commit 503", Fault.REFUSE, "PUT", COMMIT, ""),
        ("data 503", Fault.REFUSE, "PUT", DATA, ""),
        ("commit reset after", Fault.RESET_AFTER, "PUT", COMMIT, ""),
        ("data reset before", Fault.RESET_BEFORE, "PUT", DATA, ""),
        ("data reset after", Fault.RESET_AFTER, "PUT", DATA, ""),
        ("log read 503", Fault.REFUSE, "GET", r"/_delta_log/", ""),
        ("slow", Fault.SLOW, "PUT|GET", r".", ""))


def draw_rules(rng: random.Random) -> list[Rule]:
    """One fault's rules: both lost answers and two to four of the others, each firing on a drawn
    share of the requests it matches for as long as the fault is held."""
    picked = list(ALWAYS) + rng.sample(SOME, rng.randint(2, 4))
    rules = []
    for name, fault, method, key, query in picked:
        share = rng.uniform(0.02, 0.1) if fault is Fault.SLOW or method == "GET" else rng.uniform(0.1, 0.5)
        rules.append(Rule(name=name, fault=fault, method=method, key=key, query=query, times=None,
                          probability=round(share, 2), seed=rng.randrange(1 << 30),
                          seconds=round(rng.uniform(0.5, 3.0), 1) if fault is Fault.SLOW else 0.0))
    return rules




class S3Root(StorageRoot):
    """``s3://deltanode/nemesis`` on a moto server of the run's own, behind a fault proxy. Runs in
    the nemesis process; moto in a child, the proxy on threads of this process."""

    mode = StorageMode.S3

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        port = free_port()
        self.direct = StoreOptions(endpoint=f"http://127.0.0.1:{port}", region="us-east-1",
                                   access_key_id="deltanode", secret_access_key="not-a-secret")
        self.proxy = S3FaultProxy(self.direct.endpoint)
        self.server: subprocess.Popen | None = None
        self.faults = 0

    @property
    def root(self) -> str:
        return f"s3://{BUCKET}/{PREFIX}"

    def start(self) -> None:
        log = self.workdir / "logs" / "s3-server.log"
        port = self.direct.endpoint.rsplit(":", 1)[1]   # type: ignore[union-attr]
        self.server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "integration" / "s3_server.py"), port],
                                       stdout=open(log, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while "serving" not in log.read_text():
            if self.server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"nemesis: the S3 server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        self.direct.boto3().create_bucket(Bucket=BUCKET)
        self.proxy.start()
        secret = self.workdir / "s3-secret"
        secret.write_text(self.direct.secret_access_key or "")
        secret.chmod(0o600)

    def conf(self) -> list[str]:
        return [f"storage.root = {self.root}", f"storage.s3.endpoint = {self.proxy.endpoint}",
                f"storage.s3.region = {self.direct.region}", f"storage.s3.access.key.id = {self.direct.access_key_id}",
                f"storage.s3.secret.access.key.file = {self.workdir / 's3-secret'}"]

    def layout(self) -> StorageLayout:
        return StorageLayout(self.root, self.direct)

    def apply(self, kind: FaultKind, rng: random.Random, nodes: list) -> str:
        if kind != FaultKind.S3_ERRORS:
            return super().apply(kind, rng, nodes)
        rules = draw_rules(rng)
        self.proxy.add(*rules)
        self.faults += 1
        return ", ".join(f"{r.label} {r.probability:.0%}" for r in rules)

    def heal(self) -> None:
        self.proxy.clear()

    def _broken(self) -> collections.Counter:
        return collections.Counter(e.rule for e in self.proxy.exchanges if e.fault is not None)

    def stored_unanswered_commits(self) -> int:
        """Commit PUTs that S3 stored and whose answer the proxy lost."""
        return len([e for e in self.proxy.injected(Fault.LOST_ANSWER, COMMIT, "PUT") if e.upstream == 200])

    def injected(self) -> int:
        return sum(self._broken().values())

    def summary(self) -> str:
        broken = self._broken()
        return (f"s3-errors: {self.faults} fault(s), {sum(broken.values())} of {len(self.proxy.exchanges)} "
                f"requests broken ({self.stored_unanswered_commits()} commits S3 stored unanswered): "
                + ", ".join(f"{rule} x{n}" for rule, n in sorted(broken.items())))

    def prepare_duckdb(self, con) -> None:
        """DuckDB's httpfs extension from its wheel (PyPI duckdb-ext-httpfs, no download) and an S3
        secret for the server itself."""
        import duckdb
        httpfs = importlib.metadata.distribution("duckdb-ext-httpfs").locate_file(
            f"duckdb_ext/extensions/v{duckdb.__version__}/linux_amd64/httpfs.duckdb_extension")
        con.execute(f"LOAD '{httpfs}'")
        host = (self.direct.endpoint or "").removeprefix("http://")
        con.execute(f"CREATE SECRET nemesis (TYPE s3, KEY_ID '{self.direct.access_key_id}', "
                    f"SECRET '{self.direct.secret_access_key}', REGION '{self.direct.region}', ENDPOINT '{host}', "
                    f"URL_STYLE 'path', USE_SSL false)")

    def stop(self, keep: bool) -> None:
        self.proxy.stop()
        if self.server is None:
            return
        if keep:   # moto keeps the bucket in memory: copied out before it stops
            client = self.direct.boto3()
            keys = {o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
                    for o in page.get("Contents", [])}
            dirs = {k.rsplit("/", i)[0] for k in keys for i in range(1, k.count("/") + 1)}
            for key in sorted(k for k in keys - dirs if not k.endswith("/")):   # a directory marker is no file
                target = self.workdir / "s3-kept" / key
                target.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(BUCKET, key, str(target))
        self.server.terminate()
        self.server.wait(10)

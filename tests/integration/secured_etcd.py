"""An etcd as production runs it: TLS on its client port, client certificates required, and
authentication enabled with least-privilege users.

Users: ``root`` (every key; what a client certificate with CN root acts as without logging in,
as Milvus 2.3.5 does with etcd.ssl) and ``deltanode`` (read and write under ``deltanode/``, read
under ``milvus_prefix``, a Milvus's root: what a mirror needs).

    with SecuredEtcd(tmp_path / "etcd", tls_files) as etcd:
        EtcdClient(etcd.url, security=etcd.security())
"""

from __future__ import annotations

from pathlib import Path

from aetcd import rpc
from aetcd.utils import prefix_range_end

from deltanode.config.sections.etcd import EtcdSecurity
from deltanode.etcd.client import EtcdClient
from deltanode.standalone.services import EmbeddedEtcd, EtcdServerTls

from .tls_files import TlsFiles

USER, PASSWORD = "deltanode", "s3cret-Etcd-pw"
ROOT_PASSWORD = "r00t-Etcd-pw"
OWN_PREFIX = "deltanode/"


class SecuredEtcd(EmbeddedEtcd):
    """``EmbeddedEtcd`` with TLS, client certificates and users (set up at the first start)."""

    def __init__(self, data_dir: str | Path, tls_files: TlsFiles, *, milvus_prefix: str = "by-dev/") -> None:
        super().__init__(data_dir, tls=EtcdServerTls(cert=tls_files.server_cert, key=tls_files.server_key,
                                                     client_ca=tls_files.ca))
        self.files = tls_files
        self.milvus_prefix = milvus_prefix

    @property
    def url(self) -> str:
        return f"https://{self.endpoint}"

    def security(self, *, username: str | None = USER, password: str | None = PASSWORD,
                 ca_cert: Path | None = None) -> EtcdSecurity:
        """What a client of this etcd gives: the client certificate, and a login unless ``username`` is None."""
        return EtcdSecurity(tls=True, ca_cert=str(ca_cert or self.files.ca), cert=str(self.files.client_cert),
                            key=str(self.files.client_key), username=username, password=password)

    def milvus_config(self) -> dict[str, object]:
        """milvus.yaml keys of a Milvus 2.3.5 on this etcd: TLS with the client certificate, whose CN
        (root) is the user it acts as (2.3.5 has no etcd.auth)."""
        return {"etcd.endpoints": self.endpoint, "etcd.ssl.enabled": True,
                "etcd.ssl.tlsCert": str(self.files.client_cert), "etcd.ssl.tlsKey": str(self.files.client_key),
                "etcd.ssl.tlsCACert": str(self.files.ca), "etcd.ssl.tlsMinVersion": "1.2"}

    def conf(self) -> dict[str, str]:
        """The conf keys of a DeltaNode on this etcd as ``deltanode`` (the password left to the caller)."""
        return {"etcd.endpoints": self.url, "etcd.ssl.enabled": "true", "etcd.ssl.tls.ca.cert": str(self.files.ca),
                "etcd.ssl.tls.cert": str(self.files.client_cert), "etcd.ssl.tls.key": str(self.files.client_key),
                "etcd.auth.enabled": "true", "etcd.auth.username": USER}

    def start(self) -> None:
        fresh = not (self.data_dir / "data").exists()
        super().start()
        if fresh:
            self._add_users()

    def _add_users(self) -> None:
        """As etcdctl's ``user add``, ``role add``, ``role grant-permission``, ``auth enable`` do."""
        client = EtcdClient(self.url, security=self.security(username=None))
        try:
            client.loop.run(_add_users(client.loop.aio.channel, self.milvus_prefix))
        finally:
            client.close()


async def _add_users(channel, milvus_prefix: str) -> None:
    auth = rpc.AuthStub(channel)
    await auth.RoleAdd(rpc.AuthRoleAddRequest(name="root"))
    await auth.UserAdd(rpc.AuthUserAddRequest(name="root", password=ROOT_PASSWORD))
    await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"))
    await auth.RoleAdd(rpc.AuthRoleAddRequest(name=USER))
    for prefix, kind in ((OWN_PREFIX, rpc.Permission.READWRITE), (milvus_prefix, rpc.Permission.READ)):
        await auth.RoleGrantPermission(rpc.AuthRoleGrantPermissionRequest(
            name=USER, perm=rpc.Permission(permType=kind, key=prefix.encode(),
                                           range_end=prefix_range_end(prefix.encode()))))
    await auth.UserAdd(rpc.AuthUserAddRequest(name=USER, password=PASSWORD))
    await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user=USER, role=USER))
    await auth.AuthEnable(rpc.AuthEnableRequest())

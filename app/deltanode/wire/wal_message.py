"""A Milvus 2.6 WAL message's properties, as its streaming node writes them to a broker (pure logic).

Milvus 2.6 appends to the same pchannel topics as before, but every message carries properties
(Kafka record headers, Pulsar message properties; docs/milvus-facts.md §13): the payload version
``_v`` (absent: a pre-2.6 message, whose type is in its payload's MsgBase), the type ``_t``, the time
tick ``_tt`` (base 36), the vchannel ``_vc`` (absent: every vchannel of the pchannel), the type's
header ``_h``, and when they apply the transaction ``_tx``, the cipher ``_ch``, the broadcast ``_bh``
and the replicate header ``_rh`` (the message was copied from another cluster). ``parse`` reads
them into a ``WalMessage``; what the payload becomes is the executor's (``executor.wal_adaptor``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from ..failure.errors import BadInput
from . import messagespb

VERSION, TYPE, TIME_TICK, VCHANNEL, HEADER = "_v", "_t", "_tt", "_vc", "_h"
TXN, CIPHER, BROADCAST, REPLICATE = "_tx", "_ch", "_bh", "_rh"

# Payload versions (pkg/v2 streaming/util/message/version.go): 1, an msgpb request; 2, a messagespb body.
V1, V2 = 1, 2
NEWEST_VERSION = V2

# messagespb.MessageType: plain ints, compared for every message of a 2.6 pchannel.
T_TIME_TICK, T_INSERT, T_DELETE, T_FLUSH = 1, 2, 3, 4
T_CREATE_COLLECTION, T_DROP_COLLECTION, T_CREATE_PARTITION, T_DROP_PARTITION = 5, 6, 7, 8
T_MANUAL_FLUSH, T_CREATE_SEGMENT, T_IMPORT, T_SCHEMA_CHANGE, T_ALTER_COLLECTION = 9, 10, 11, 12, 13
T_ALTER_REPLICATE_CONFIG = 800
T_BEGIN_TXN, T_COMMIT_TXN, T_ROLLBACK_TXN, T_TXN = 900, 901, 902, 999

TYPE_NAMES = {
    1: "TimeTick", 2: "Insert", 3: "Delete", 4: "Flush", 5: "CreateCollection", 6: "DropCollection",
    7: "CreatePartition", 8: "DropPartition", 9: "ManualFlush", 10: "CreateSegment", 11: "Import",
    12: "SchemaChange", 13: "AlterCollection", 14: "AlterLoadConfig", 15: "DropLoadConfig", 16: "CreateDatabase",
    17: "AlterDatabase", 18: "DropDatabase", 19: "AlterAlias", 20: "DropAlias", 21: "RestoreRBAC",
    22: "AlterUser", 23: "DropUser", 24: "AlterRole", 25: "DropRole", 26: "AlterUserRole", 27: "DropUserRole",
    28: "AlterPrivilege", 29: "DropPrivilege", 30: "AlterPrivilegeGroup", 31: "DropPrivilegeGroup",
    32: "AlterResourceGroup", 33: "DropResourceGroup", 34: "CreateIndex", 35: "AlterIndex", 36: "DropIndex",
    800: "AlterReplicateConfig", 900: "BeginTxn", 901: "CommitTxn", 902: "RollbackTxn", 999: "Txn",
}

# The commonpb.MsgType of a type, as Milvus's own adaptor maps them (pkg/v2
# streaming/util/message/adaptor/message_type.go): the quarantine table's ``msg_type`` means the
# same for a 2.6 message as for an older one. Types without one are recorded without a msg_type.
COMMONPB_TYPES = {T_TIME_TICK: 1200, T_INSERT: 400, T_DELETE: 401, T_FLUSH: 406, T_MANUAL_FLUSH: 405,
                  T_CREATE_SEGMENT: 407, T_CREATE_COLLECTION: 100, T_DROP_COLLECTION: 101,
                  T_CREATE_PARTITION: 200, T_DROP_PARTITION: 201, T_IMPORT: 408, T_SCHEMA_CHANGE: 1900,
                  T_ALTER_COLLECTION: 111}

# A transaction kept alive forever (message.TxnKeepaliveInfinite, -1 s): it never expires.
INFINITE_KEEPALIVE_MS = -1000
_MAX_UINT64 = (1 << 64) - 1


class WalFormatError(BadInput):
    """A property does not decode as Milvus writes it; ``str(self)`` names the property."""


def type_name(msg_type: int) -> str:
    return TYPE_NAMES.get(msg_type, f"type {msg_type}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Txn:
    """A message's transaction (``_tx``: messagespb.TxnContext)."""

    txn_id: int
    keepalive_ms: int

    @property
    def expires(self) -> bool:
        return self.keepalive_ms != INFINITE_KEEPALIVE_MS


@dataclass(frozen=True, slots=True, kw_only=True)
class Cipher:
    """A message encrypted by a Milvus cipher plugin (``_ch``: messagespb.CipherHeader)."""

    zone: int            # the encryption zone (ez_id)
    collection_id: int
    payload_bytes: int   # the payload's size before encryption


@dataclass(frozen=True, slots=True, kw_only=True)
class WalMessage:
    """The properties of one 2.6 message that say what it is and where it goes.

    Runs on executors (a task's dispatcher reads each 2.6 message's properties once)."""

    version: int
    type: int
    time_tick: int
    vchannel: str | None        # None: a message of every vchannel of the pchannel (a TimeTick)
    header: bytes               # the binary messagespb.<Type>MessageHeader (``header_as`` decodes it)
    txn: Txn | None = None
    cipher: Cipher | None = None
    broadcast: bool = False     # one vchannel's copy of a broadcast (``_bh``): its own ``_vc``
    replicated: bool = False    # copied from another cluster (``_rh``): taken as its plain form

    @property
    def name(self) -> str:
        return type_name(self.type)

    def header_as(self, cls: Any) -> Any:
        """The header decoded as ``cls`` (a ``messagespb`` class)."""
        try:
            return cls.FromString(self.header)
        except DecodeError as e:
            raise WalFormatError(f"{self.name} header (_h) is not a {cls.DESCRIPTOR.name}: {e}") from None


def version(props: Mapping[str, str]) -> int:
    """``_v``: 0 when absent (a pre-2.6 message)."""
    raw = props.get(VERSION)
    if raw is None or raw == "":
        return 0
    try:
        return int(raw, 10)
    except ValueError:
        raise WalFormatError(f"payload version _v {raw!r} is not a decimal number") from None


def time_tick(props: Mapping[str, str]) -> int:
    """``_tt``: a uint64 in base 36."""
    raw = props.get(TIME_TICK)
    if raw is None:
        raise WalFormatError("no time tick (_tt)")
    try:
        value = int(raw, 36)
    except ValueError:
        raise WalFormatError(f"time tick _tt {raw!r} is not base 36") from None
    if not 0 <= value <= _MAX_UINT64:
        raise WalFormatError(f"time tick _tt {raw!r} is out of the uint64 range")
    return value


def _proto(props: Mapping[str, str], key: str, cls: Any) -> Any:
    """The base64 proto at ``key`` decoded as ``cls``, or None when absent."""
    raw = props.get(key)
    if raw is None:
        return None
    try:
        return cls.FromString(_base64(raw))
    except (WalFormatError, DecodeError) as e:
        raise WalFormatError(f"{key} is not a base64 {cls.DESCRIPTOR.name}: {e}") from None


def _base64(raw: str) -> bytes:
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as e:
        raise WalFormatError(str(e)) from None


def parse(props: Mapping[str, str]) -> WalMessage:
    """The message the properties describe; ``WalFormatError`` when one does not decode."""
    raw_type = props.get(TYPE)
    try:
        msg_type = int(raw_type or "", 10)
    except ValueError:
        raise WalFormatError(f"message type _t {raw_type!r} is not a decimal number") from None
    header = props.get(HEADER) or ""
    try:
        header_bytes = _base64(header) if header else b""
    except WalFormatError as e:
        raise WalFormatError(f"header _h is not base64: {e}") from None
    txn = _proto(props, TXN, messagespb.TxnContext)
    cipher = _proto(props, CIPHER, messagespb.CipherHeader)
    vchannel = props.get(VCHANNEL) or None
    if vchannel is None and BROADCAST in props:   # Milvus's reader refuses it too (message_impl.go)
        raise WalFormatError("a copy of a broadcast (_bh) without its vchannel (_vc)")
    return WalMessage(
        version=version(props), type=msg_type, time_tick=time_tick(props), vchannel=vchannel, header=header_bytes,
        txn=None if txn is None else Txn(txn_id=txn.txn_id, keepalive_ms=txn.keepalive_milliseconds),
        cipher=None if cipher is None else Cipher(zone=cipher.ez_id, collection_id=cipher.collection_id,
                                                  payload_bytes=cipher.payload_bytes),
        broadcast=BROADCAST in props, replicated=REPLICATE in props)

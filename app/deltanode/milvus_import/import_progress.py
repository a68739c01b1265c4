"""How far a vchannel's import from Milvus got, as its commits record it (driver, admin).

Each import commit of a vchannel moves its own ``txn`` (``import_app``) and carries, under
``IMPORT_KEY`` in its commitInfo, the import's progress: the segments whose files are in (with
the fingerprint of the Milvus files they were read from), rows and deleted rows per segment, the
totals of the meta read last, when it started, and whether it is done.
"""

from __future__ import annotations

import json
import time

from ..delta import json_codec
from ..delta.delta_log import DeltaLog

IMPORT_KEY = "deltanode.milvus_import"


def import_app(vchannel: str) -> str:
    """The ``txn`` app id of a vchannel's import."""
    return f"{vchannel}#milvus-import"


def import_progress(insert_log: DeltaLog, vchannel: str) -> dict | None:
    """The vchannel's import as its last import commit left it (None: it never imported)."""
    txn = insert_log.txn(import_app(vchannel))
    if txn is None:
        return None
    quoted = json_codec.dumps(vchannel)
    for _, info in insert_log.commit_infos():
        doc = info.get(IMPORT_KEY)
        if doc and quoted in doc:
            found = json.loads(doc).get(vchannel)
            if found is not None and found.get("txn") == txn:
                return found
    raise RuntimeError(f"{vchannel}: {insert_log.uri} has import txn {txn} but no commit metadata for it")


def summary(doc: dict, now_ms: int | None = None) -> dict:
    """What ``admin show-collections`` shows of an import: done or not, segments and rows imported
    of the totals, and the rate since it started (up to its last commit)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    end = doc.get("updated_ms", now_ms) if doc.get("done") else now_ms
    seconds = max(1e-3, (end - doc.get("started_ms", end)) / 1000)
    return {"done": bool(doc.get("done")), "segments": doc.get("segments_done", 0),
            "segments_total": doc.get("segments_total", 0), "rows": doc.get("rows_done", 0),
            "rows_total": doc.get("rows_total", 0), "deleted_rows": doc.get("deleted_done", 0),
            "rows_per_second": round(doc.get("rows_done", 0) / seconds, 1)}

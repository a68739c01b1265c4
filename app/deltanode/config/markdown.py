"""The key table as Markdown: ``python -m deltanode.config`` prints it, docs/configuration.md holds it."""

from __future__ import annotations

from .keys import KEYS


def keys_markdown() -> str:
    """The key table as Markdown (for docs/configuration.md)."""
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for k in KEYS.values():
        default = "(required)" if k.required else (k.default if k.default is not None else "")
        rows.append(f"| `{k.name}` | {k.type_doc.replace('|', chr(92) + '|')} | `{default}` | {k.doc} |")
    rows.append("| `spark.*` | text | | passed to Spark (spark-submit --conf) untouched |")
    rows.append("| `mq.kafka.*` | text | | librdkafka properties for every Kafka client (SASL, TLS, ...), "
                "untouched; not group.id, enable.auto.commit, auto.offset.reset, enable.partition.eof |")
    return "\n".join(rows)

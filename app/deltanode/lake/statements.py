"""Whether a statement only reads (driver): the ``sql`` subcommand runs no statement that writes.

DeltaNode must stay the only writer of its tables (its commits carry each vchannel's checkpoint
and a compare-and-swap on its ``txn``; docs/delta-commits.md), and a ``DELETE``, ``VACUUM`` or
``RESTORE`` on ``delta.`<path>``` would write to them. Spark runs a command as soon as
``spark.sql`` parses it, so the statement is parsed first, with the session's parser (Delta's
extension included), and its plan checked: a query, ``DESCRIBE HISTORY``, or a command that only
shows (``SHOW ...``, ``DESCRIBE ...``, ``EXPLAIN ...``: an explained statement is not run).
Spark's parser is reached through the JVM session's state, which pyspark does not expose.
"""

from __future__ import annotations

_COMMAND = "org.apache.spark.sql.catalyst.plans.logical.Command"
_PARSED_STATEMENT = "org.apache.spark.sql.catalyst.plans.logical.ParsedStatement"
_READ_COMMANDS = ("Show", "Describe", "Explain")
_WITH = ("UnresolvedWith", "WithCTE")


def writing_statement(spark, query: str) -> str | None:
    """The name of the plan ``query`` parses to when it may write or change anything (``DeleteFromTable``,
    ``InsertIntoStatement``, ``SetCommand``, ...), None when it only reads. A query that does not
    parse raises pyspark's ``ParseException``."""
    jvm = spark._jvm
    plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(query)
    while plan.getClass().getSimpleName() in _WITH:   # WITH ... INSERT is an INSERT
        plan = plan.children().head()
    name = plan.getClass().getSimpleName()
    command = jvm.java.lang.Class.forName(_COMMAND).isInstance(plan)
    statement = jvm.java.lang.Class.forName(_PARSED_STATEMENT).isInstance(plan) or name.endswith("Statement")
    if command and name.startswith(_READ_COMMANDS):
        return None
    return name if command or statement else None

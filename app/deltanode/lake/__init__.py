"""Spark SQL over the lake: every collection's insert_log as a table named after the collection.

``tables`` names the collections' tables from the catalog, ``columns`` says in each column's
comment what Milvus type it holds, ``views`` registers the tables in a Spark session, ``rows_json``
prints result rows as Milvus's query returns them, ``spark`` configures a session for Delta
(``configure``, ``register_tables``: docs/spark-sql.md), ``s3a`` sets Hadoop's S3A connector for a
root on S3, ``statements`` tells a query from a statement that writes, and ``sql_command`` is
``./spark-submit.sh sql``. delta-spark applies the tables' deletion vectors, so a table shows a
collection's current rows.
"""

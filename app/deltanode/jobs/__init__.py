"""DeltaNode's Spark jobs, one contract for all of them (the shape of pyspark's ``sql/datasource.py``).

The driver plans a job's specs (small picklable records), ``launch`` runs them as one Spark job,
each spec turned into a picklable result on an executor by the job kind's function, and the
driver commits the results or, on a failed job, aborts (deletes what it may have written, fails
what the job was for). ``contract`` says what a job kind is and holds the executor side
(``run_pickled``: it runs on executors); ``launch`` is the driver side (runs on the driver).

The kinds, each declared beside its driver side: the cycle (``pipeline.cycle``: ``TaskSpec`` ->
``TaskOutput``), delete marking (``pipeline.delete_mark_job``: ``MarkTask`` -> ``MarkResult``),
compaction (``pipeline.compaction_rounds``: ``Rewrite`` -> ``FileEntry | None``), the Milvus import
(``milvus_import.importer``: ``SegmentImport`` -> ``ImportedSegment``, ``DeleteImport`` ->
``ImportedDeletes``) and the warm-up (``pipeline.warmup``: a task number -> ``WarmedWorker``).
"""

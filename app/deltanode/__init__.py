"""DeltaNode: the Milvus DataNode write path on Apache Spark, persisting to Delta Lake."""

__version__ = "0.1.0"

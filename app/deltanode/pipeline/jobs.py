"""The Spark job group of the pipeline's jobs: cancelled together when the pipeline stops."""

JOB_GROUP = "deltanode-pipeline"

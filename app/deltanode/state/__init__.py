"""DeltaNode's own state kept in its Delta tables (driver; ``current_state`` also for readers): a
vchannel's committed checkpoint and segment meta (``channel_state``), the commit of a collection's
vchannels as one Delta version (``commit``), reading the state back (``meta``), the rows as Milvus
returns them (``current_state``), and the compaction plan."""

"""The conf as typed sections, one module per concern (pure data, both sides): keyword-only frozen
dataclasses that a package takes instead of the conf, so it knows the few values it uses by name
and type. ``config.settings`` reads the conf into them, in that one place; a package that makes an
object of its own from its section (``mq.Broker.of``, ``delta.StorageLayout.of``) does so itself.

- ``etcd``: DeltaNode's etcd, and how to reach an etcd (TLS, login);
- ``broker``: the message queue and DeltaNode's own pchannels;
- ``storage``: ``storage.root`` and the object store's options;
- ``mirror``: the Milvus whose collections are mirrored;
- ``pipeline``: the driver's cycles, syncs, seals and compaction;
- ``processes``: a DataNode's and the coordinator's own settings;
- ``embedded``: what ``standalone`` starts itself.
"""

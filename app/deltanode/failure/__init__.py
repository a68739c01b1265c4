"""How DeltaNode fails, said once (standard library only; importable by every layer and by the
command line):

- ``errors``: ``DeltaNodeError``, the root of every exception of DeltaNode's own, and ``BadInput``
  under it; raised on the driver and on executors.
- ``kinds``: what failed (``FailureKind``) and what the driver does about it (``Action``: retry,
  back off, quarantine, stop the vchannel, stop the node), one action per kind.
- ``causes``: whether an error says a filesystem out of space or an object store that did not
  answer.
- ``classify``: the one classifier, from an exception or a task's failure to a ``Failure`` (a
  kind, its message, its action) and the wait before a stopped vchannel is loaded again. Runs on
  the driver, and on executors where a task words its error; the driver's reaction to it is
  ``pipeline.vchannel_stops``.
- ``crash_points``: named points where the recovery tests crash or pause a process (driver and
  executors).
"""

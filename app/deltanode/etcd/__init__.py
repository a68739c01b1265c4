"""DeltaNode's etcd layer: the client, the session, the channel watch and the commit fence.

gRPC's core logs each failed TLS handshake to stderr at INFO level (``ssl_transport_security.cc``),
beside the one-line error DeltaNode gives: only its errors are shown, unless the environment asks
for more. This runs before any module here imports grpc.
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

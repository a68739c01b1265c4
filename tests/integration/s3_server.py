"""An S3-compatible server on loopback for the object-storage tests: moto, serving one request at a time.

    python s3_server.py PORT

moto answers a PUT with ``If-None-Match: *`` by 412 when the key exists, but checks and then
stores in two steps: with its default threaded server two concurrent PUTs of one key can both
pass the check, which real S3 never allows. Served one request at a time, each conditional PUT is
atomic, as S3's is; what the tests then prove is DeltaNode's protocol, not moto's concurrency.
"""

from __future__ import annotations

import sys

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server


def main() -> None:
    server = make_server("127.0.0.1", int(sys.argv[1]), DomainDispatcherApplication(create_backend_app),
                         threaded=False, request_handler=MotoRequestHandler)
    print("serving", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

"""Command line of DeltaNode: ``./spark-submit.sh SUBCOMMAND --conf FILE [...]``.

Parsing (``cli_parser``) and ``--help`` need nothing but the standard library; the code behind
each subcommand is imported only when it runs:

  standalone  -> deltanode.standalone.run.run(conf) -> int
  datanode    -> deltanode.datanode.run.run(conf) -> int
  datacoord   -> deltanode.datacoord.run.run(conf) -> int
  admin NAME  -> deltanode.admin.commands.<NAME with - as _>(conf, args) -> int
  sql         -> deltanode.lake.sql_command.run(conf, args) -> int

Exit codes: 0 success, 1 a service failed (message on stderr), 2 usage or configuration
error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from deltanode import __version__
from deltanode.cli_parser import PROG, build_parser
from deltanode.config import ConfError, load_conf
from deltanode.config.spark_conf import spark_options
from deltanode.logs import setup_logging

RUNNERS = {
    "standalone": "deltanode.standalone.run",
    "datanode": "deltanode.datanode.run",
    "datacoord": "deltanode.datacoord.run",
}
ADMIN_MODULE = "deltanode.admin.commands"
SQL_MODULE = "deltanode.lake.sql_command"

log = logging.getLogger("deltanode")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse argv; raises SystemExit (0 after --help, 2 on a usage error)."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "admin" and args.conf is None:
        parser.error(f"admin {args.admin_command}: --conf FILE is required (before or after {args.admin_command})")
    if args.command == "sql" and args.query is None and not args.print_conf:
        parser.error("sql: QUERY is required")
    return args


def _resolve(args: argparse.Namespace):
    """(module name, function name) for the parsed subcommand."""
    if args.command == "admin":
        return ADMIN_MODULE, args.admin_command.replace("-", "_")
    if args.command == "sql":
        return SQL_MODULE, "run"
    return RUNNERS[args.command], "run"


def _load_target(module_name: str, func_name: str, what: str):
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            print(f"{PROG} {what}: {module_name} is not part of this build ({e})", file=sys.stderr)
        else:
            print(f"{PROG} {what}: {module_name} needs the module {missing!r}, which is not "
                  f"installed ({e}); run build/bootstrap.sh", file=sys.stderr)
        return None
    func = getattr(module, func_name, None)
    if not callable(func):
        print(f"{PROG} {what}: {module_name} has no function {func_name}()", file=sys.stderr)
        return None
    return func


def _load(args: argparse.Namespace):
    try:
        return load_conf(args.conf)
    except ConfError as e:
        if not os.path.exists(args.conf) and not os.path.isabs(args.conf):
            raise ConfError(f"{e} (relative to {os.getcwd()}; run from the repository root "
                            "or pass --conf FILE)") from None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:  # --help, --version or a usage error (argparse printed it)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    what = args.command + (f" {args.admin_command}" if args.command == "admin" else "")
    try:
        conf = _load(args)
    except ConfError as e:
        print(str(e), file=sys.stderr)
        return 2
    if args.print_conf:
        _print_conf(args, conf)
        return 0
    setup_logging(conf.get("log.level"))
    module_name, func_name = _resolve(args)
    func = _load_target(module_name, func_name, what)
    if func is None:
        return 2
    log.debug("%s: conf %s, running %s.%s", what, args.conf, module_name, func_name)
    return _run(func, conf, args, what)


def _print_conf(args: argparse.Namespace, conf) -> None:
    import deltanode
    print(f"# deltanode {__version__} from {os.path.dirname(deltanode.__file__)}")
    print(f"# conf file: {args.conf}")
    print(conf.describe())


def _run(func, conf, args: argparse.Namespace, what: str) -> int:
    """Call the subcommand's function; its errors become one line on stderr and an exit code."""
    from deltanode.etcd.errors import EtcdError  # standard library only
    from deltanode.mq.types import BrokerError  # standard library only
    from deltanode.standalone.services import ServiceError  # standard library only
    try:
        rc = func(conf, args) if args.command in ("admin", "sql") else func(conf)
    except ConfError as e:
        print(str(e), file=sys.stderr)
        return 2
    except (ServiceError, EtcdError, BrokerError) as e:   # e.g. an etcd or a broker that refuses us at start
        print(f"{PROG} {what}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG} {what}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (``admin show-segments | head``): stop quietly, as Unix tools do;
        # stdout goes to /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 0 if rc is None else int(rc)


# ----------------------------------------------------------------------------- spark-submit glue

def spark_submit_args(argv: Sequence[str]) -> list[str]:
    """The spark-submit options for a command line: ``--conf k=v`` for each of ``spark_options``.
    Raises SystemExit on a usage error and ConfError."""
    args = parse_args(argv)
    conf = _load(args)
    if args.command == "standalone" and not args.print_conf:
        _check_embedded_ports(conf)
    out: list[str] = []
    for key, value in spark_options(args.command, conf).items():
        out += ["--conf", f"{key}={value}"]
    return out


def _check_embedded_ports(conf) -> None:
    """Fail before a JVM starts when a port of an embedded service is taken (standalone checks
    again when it starts them)."""
    from deltanode.config.settings import embedded_settings
    from deltanode.standalone.services import PortInUseError, ensure_port_free
    embedded = embedded_settings(conf)
    for started, port, what in ((embedded.etcd, embedded.etcd_port, "etcd client port"),
                                (embedded.broker, embedded.broker_port, "broker port")):
        if started:
            try:
                ensure_port_free(port.port, what)
            except PortInUseError as e:
                raise PortInUseError(f"{e} ({port.origin})") from None


def _spark_args_main(argv: Sequence[str]) -> int:
    """Used by spark-submit.sh: checks the command line and conf before any JVM starts, then
    prints NUL-separated the options of spark-submit's launcher JVM (``SPARK_LAUNCHER_OPTS``,
    ``config.jvm_options.launcher_options``) and the spark-submit options."""
    from deltanode.config.jars import MissingJars
    from deltanode.config.jvm_options import launcher_options
    from deltanode.standalone.services import ServiceError
    try:
        opts = spark_submit_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    except (ConfError, MissingJars) as e:
        print(str(e), file=sys.stderr)
        return 2
    except ServiceError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write("".join(o + "\0" for o in [launcher_options(), *opts]))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

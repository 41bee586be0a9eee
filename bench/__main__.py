"""``python -m bench <subcommand> [options]``: see bench/__init__.py."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from pathlib import Path
from types import FrameType

import bench
from bench.report import Report

# subcommand -> its module (bench.<module>, which has HELP, add_arguments(p) and run(args,
# report)); what only some need (celery, pyspark, grpc) each imports when it runs.
SUBCOMMANDS = {
    "beanstalk": "beanstalk",
    "cluster": "cluster",
    "compare": "compare",
    "sdk": "sdk",
    "celery": "celery_brokers",
    "results": "celery_results",
    "restart": "restart",
    "startup": "startup",
    "memory": "memory",
    "spark": "spark",
    "analytics": "analytics",
    "dashboard": "dashboard",
    "metrics": "metrics",
    "profile": "profile_row",
    "hops": "hops",
    "mypyc": "compiled",
    "schedules": "schedules",
}


def _stop(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop the servers


def parser() -> argparse.ArgumentParser:
    """The command line: one subparser per subcommand, each with --markdown and --json."""
    top = argparse.ArgumentParser(
        prog="python -m bench",
        description=bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--markdown", type=Path, help="also write the report to this file")
    common.add_argument("--json", type=Path, help="write the report and raw figures as JSON")
    subs = top.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(f"bench.{module_name}")
        p = subs.add_parser(
            name,
            parents=[common],
            help=module.HELP,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    report = Report(argv)
    args.run(args, report)
    return report.emit(args.markdown, args.json)


if __name__ == "__main__":
    sys.exit(main())

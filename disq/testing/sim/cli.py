"""``python -m disq.testing.sim --seed N [--trace]``: run (and replay) seeds."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from disq.testing.sim.config import SimConfig, sweep_config
from disq.testing.sim.model import InvariantViolation
from disq.testing.sim.simulation import run_seed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m disq.testing.sim", description="Run one seeded cluster simulation."
    )
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--nodes", type=int, help="override the seed's node count (3-7)")
    ap.add_argument("--view", choices=("swim", "oracle", "static"))
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--fsync-lost", action="store_true")
    ap.add_argument("--trace", action="store_true", help="print every event")
    ap.add_argument("--seeds", type=int, default=1, help="run this many seeds from --seed")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a SimConfig field (Python literal), e.g. --set loss=0.3 --set jobs=80",
    )
    args = ap.parse_args(argv)
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in {f.name for f in dataclasses.fields(SimConfig)}:
            ap.error(f"unknown SimConfig field {key!r}")
        overrides[key] = ast.literal_eval(value)
    if args.nodes is not None:
        overrides["nodes"] = args.nodes
        overrides["repl"] = None
        overrides["max_down"] = None
    if args.view is not None:
        overrides["view"] = args.view
    if args.jobs is not None:
        overrides["jobs"] = args.jobs
    if args.fsync_lost:
        overrides["fsync_lost"] = True
    out = sys.stdout.write
    return _run(args, overrides, out)


def _run(args: argparse.Namespace, overrides: dict[str, Any], out: Callable[[str], Any]) -> int:
    failed = 0
    for seed in range(args.seed, args.seed + args.seeds):
        cfg = sweep_config(seed, trace=args.trace, **overrides)
        try:
            res = run_seed(seed, cfg)
        except InvariantViolation as e:
            failed += 1
            out(f"{e}\n")
            continue
        if args.trace:
            for line in res.trace:
                out(line + "\n")
        stats = " ".join(f"{k}={v}" for k, v in res.stats.items() if v)
        out(f"seed {seed} ok: {stats} trace={res.trace_hash[:16]}\n")
        for line in res.leftover:
            out(f"  leftover {line}\n")
    return 1 if failed else 0

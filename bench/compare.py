"""The same workload against two builds of disq, interleaved in one run: before and after a
change.

The old side is a commit (``--base``, exported with ``git archive`` into a temporary
directory: no build, so it runs its Python sources) or a checkout (``--old-tree``, e.g. a
compiled main; its own venv's interpreter when it has one). The new side is this working tree
(uncommitted changes included) or ``--new-tree``. A node of a side imports that side's
``disq`` (its tree first on PYTHONPATH; checked before anything runs). Both sides run the
rows of ``bench beanstalk`` (a standalone node; ``-b DIR -f 1000`` for aof rows) and
``bench cluster`` (3 nodes) with this tree's harness and load generators, row by row, old then
new, ``--repeat`` times. Each side's figure is its median; the spread is min-max. The verdict
is "within noise" when |new/old - 1| is at most the sum of the two sides' relative spreads
((max - min) / median), else "faster" or "slower": use ``--repeat 3`` or more.

Default ``--base``: the merge base of HEAD and main (origin/main), else HEAD~1; while the
change is uncommitted, ``--base HEAD``.

  python -m bench compare --base HEAD
  python -m bench compare --quick --which beanstalk --rows-beanstalk 'put/c50/p16/mem'
  python -m bench compare --old-tree /work/main --which cluster \\
      --rows-cluster 'addjob-r1/c50/p16/mem,getjob-ackjob/c50/p16/mem' --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench import beanstalk, cluster
from bench.common import ROOT, BenchError, Build, Cell, git, log
from bench.report import Report, fmt_int

HELP = "the same workload against two builds of disq (before / after a change)"

DEFAULT_ROWS = "*/c50/p16/*"


def default_base() -> str:
    for branch in ("main", "origin/main"):
        try:
            return git("merge-base", "HEAD", branch)
        except BenchError:
            continue
    return "HEAD~1"


def export(rev: str, dest: Path) -> None:
    """``git archive REV | tar -x -C dest``."""
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", rev], stdout=subprocess.PIPE)
    assert archive.stdout is not None
    tar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=False)
    archive.stdout.close()
    if archive.wait() != 0 or tar.returncode != 0:
        raise BenchError(f"exporting {rev} into {dest} failed")


def rel_spread(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else 0.0


def verdict(old: list[float], new: list[float]) -> tuple[str, str]:
    """(new / old of the medians, within noise / faster / slower)."""
    if not old or not new or statistics.median(old) <= 0:
        return "-", "failed"
    r = statistics.median(new) / statistics.median(old)
    band = rel_spread(old) + rel_spread(new)
    what = "within noise" if abs(r - 1) <= band else ("faster" if r > 1 else "slower")
    return f"{r:.3f}x", f"{what} ({100 * (r - 1):+.0f}%, noise ±{100 * band:.0f}%)"


def spread(values: list[float]) -> str:
    return f"{fmt_int(min(values))}-{fmt_int(max(values))}" if values else "-"


def cpu(cells: list[Cell]) -> list[float]:
    return [
        c.result.server_cpu_us_per_op for c in cells if c.result and c.result.server_cpu_us_per_op
    ]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", help="old side: a git rev (default: merge base with main)")
    p.add_argument("--old-tree", type=Path, help="old side: a checkout instead of --base")
    p.add_argument("--new-tree", type=Path, help="new side: a checkout (default: this tree)")
    p.add_argument("--which", choices=["beanstalk", "cluster", "both"], default="both")
    p.add_argument("--rows-beanstalk", default=DEFAULT_ROWS, help="bench beanstalk --rows")
    p.add_argument("--rows-cluster", default=DEFAULT_ROWS, help="bench cluster --rows")
    p.add_argument("--seconds", type=float, help="per run (default 3 beanstalk, 5 cluster)")
    p.add_argument("--repeat", type=int, default=3, help="runs per side and row")
    p.add_argument("--quick", action="store_true", help="1 s runs, once each")


def run(args: argparse.Namespace, report: Report) -> None:
    repeat = 1 if args.quick else args.repeat
    if repeat == 1:
        log("warning: one run per side gives no spread: every difference is 'faster'/'slower'")
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp_name:
        tmp = Path(tmp_name)
        if args.old_tree:
            old = Build.checkout(args.old_tree, f"old: {args.old_tree}")
        else:
            rev = git("rev-parse", "--verify", f"{args.base or default_base()}^{{commit}}")
            export(rev, tmp / "old")
            old = Build.checkout(
                tmp / "old", "old: " + git("log", "-1", "--format=%h %<(60,trunc)%s", rev)
            )
        if args.new_tree:
            new = Build.checkout(args.new_tree, f"new: {args.new_tree}")
        else:
            dirty = " + working tree changes" if git("status", "--porcelain") else ""
            new = Build.this()
            head = git("log", "-1", "--format=%h %<(60,trunc)%s").rstrip()
            new = Build(f"new: {head}{dirty}", ROOT, new.python)
        for side in (old, new):
            report.note(f"{side.label} ({side.describe()}; {side.python})")
        benches = ["beanstalk", "cluster"] if args.which == "both" else [args.which]
        for bench in benches:
            _compare(bench, args, repeat, (old, new), report, tmp)


def _compare(
    bench: str,
    args: argparse.Namespace,
    repeat: int,
    sides: tuple[Build, Build],
    report: Report,
    tmp: Path,
) -> None:
    run_one: Callable[[str, Build], Cell]
    if bench == "beanstalk":
        seconds = args.seconds or (1.0 if args.quick else 3.0)
        ids = beanstalk.selected(args.rows_beanstalk, [r.id for r in beanstalk.ROWS])
        by_id = {r.id: r for r in beanstalk.ROWS}

        def run_one(row_id: str, build: Build) -> Cell:
            system = beanstalk.disq_system(build, ["-f", "1000"])
            return beanstalk.throughput_run(by_id[row_id], system, seconds, 5_000_000, tmp)

    else:
        opts = cluster.RunOptions(seconds=args.seconds or (1.0 if args.quick else 5.0))
        ids = beanstalk.selected(args.rows_cluster, [r.id for r in cluster.ROWS])

        def run_one(row_id: str, build: Build) -> Cell:
            nodes = cluster.disq_nodes(build, name=build.label.split(":")[0])
            return cluster.run_row(cluster.row_by_id(row_id), nodes, opts, tmp)

    table = report.table(
        f"bench {bench}: {seconds if bench == 'beanstalk' else opts.seconds:g} s runs, "
        f"{repeat} per side, interleaved old / new",
        [
            "row",
            "old ops/s (median)",
            "old min-max",
            "new ops/s (median)",
            "new min-max",
            "new / old",
            "verdict",
            "old CPU µs/op",
            "new CPU µs/op",
        ],
    )
    for i, row_id in enumerate(ids, 1):
        cells: dict[str, list[Cell]] = {"old": [], "new": []}
        for rep in range(repeat):
            for name, build in zip(("old", "new"), sides, strict=True):
                log(f"{bench} row {i}/{len(ids)}: {row_id}, {name} side, run {rep + 1}/{repeat}")
                cells[name].append(run_one(row_id, build))
        ops = {k: [c.ops_per_s for c in v if c.ops_per_s is not None] for k, v in cells.items()}
        for name, runs in cells.items():
            for c in runs:
                if c.error:
                    report.fail(f"{bench} {row_id}, {name} side: {c.error}")
        cpus = {k: cpu(v) for k, v in cells.items()}
        table.add(
            row_id,
            fmt_int(statistics.median(ops["old"])) if ops["old"] else "FAIL",
            spread(ops["old"]),
            fmt_int(statistics.median(ops["new"])) if ops["new"] else "FAIL",
            spread(ops["new"]),
            *verdict(ops["old"], ops["new"]),
            *(f"{statistics.median(cpus[k]):.1f}" if cpus[k] else "-" for k in ("old", "new")),
        )

#!/usr/bin/env python3
"""Compare the server's speed before and after a change, side by side in one run.

The old commit (``--base``) is exported with ``git archive REV | tar -x`` into a temporary
directory; no build is needed: both sides run with this repository's own virtualenv
interpreter, the old one as ``env PYTHONPATH=TMPDIR .venv/bin/python -m disq.node_main`` (so
it imports the old ``disq`` package, checked before anything runs), the new one likewise with
``PYTHONPATH=ROOT`` (the working tree, uncommitted changes included). Both are driven by the
working tree's own benchmark scripts and load generators:

  * ``scripts/bench_beanstalk.py --only disq --disq-cmd CMD`` (one disq server, beanstalkd
    flags appended),
  * ``scripts/bench_cluster.py --node-cmd CMD`` (3-node cluster, config file appended),

interleaved ``old, new, old, new, ...`` (``--repeat`` rounds of each), by default on every
50-connection, pipeline-16 row (``*/c50/p16/*``: persistence off and on). Each row's ops/s
is the median over the repeats; the spread is min-max over them. The verdict is "within
noise" when |new/old - 1| is at most the sum of the two sides' relative spreads
((max - min) / median, old + new), else "faster" or "slower". With ``--repeat 1`` there is no
spread, so every difference counts: use 3 or more.

Default ``--base``: ``git merge-base HEAD origin/main`` if there is an ``origin/main``, else
``HEAD~1``. While the change is still uncommitted in the working tree, use ``--base HEAD``.

Examples:
  .venv/bin/python scripts/bench_before_after.py --base HEAD
  .venv/bin/python scripts/bench_before_after.py --base v0.3 --repeat 5 --markdown /tmp/ba.md
  .venv/bin/python scripts/bench_before_after.py --which beanstalk --duration 1 --repeat 1 \\
      --rows-beanstalk 'put/c50/p16/mem'
  .venv/bin/python scripts/bench_before_after.py --which cluster \\
      --rows-cluster 'addjob-r1/c50/p16/*,getjob-ackjob/c50/p16/mem'

Row ids (comma-separated fnmatch patterns, as in the two scripts): ``WORKLOAD/cN/pK/PERSIST``
with PERSIST ``mem`` or ``aof``, e.g. ``put/c50/p16/mem`` (beanstalk: put, reserve-delete,
put-reserve-delete) or ``addjob-r3/c50/p16/aof`` (cluster: addjob-r1, addjob-r3,
addjob-r3-async, getjob-ackjob).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
sys.path[:0] = [p for p in (str(ROOT / "scripts"),) if p not in sys.path]

from bench_common import fmt_int, log, machine_info  # noqa: E402

VENV_PY = ROOT / ".venv" / "bin" / "python"
DEFAULT_ROWS = "*/c50/p16/*"
BENCHES = {  # name -> (script, default --duration of that script)
    "beanstalk": ("bench_beanstalk.py", 3.0),
    "cluster": ("bench_cluster.py", 5.0),
}


class SetupError(Exception):
    pass


# --------------------------------------------------------------------------------------------
# git and the two trees


def git(*args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SetupError(f"git {shlex.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def default_base() -> tuple[str, str]:
    """(rev, why) for --base when none is given."""
    try:
        git("rev-parse", "--verify", "--quiet", "origin/main^{commit}")
    except SetupError:
        return "HEAD~1", "no origin/main: HEAD~1"
    return git("merge-base", "HEAD", "origin/main"), "git merge-base HEAD origin/main"


def describe(rev: str) -> str:
    """'abc1234 subject' of a commit."""
    return git("log", "-1", "--format=%h %s", rev)


def export_tree(rev: str, dest: Path) -> None:
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", rev], stdout=subprocess.PIPE)
    assert archive.stdout is not None
    tar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=False)
    archive.stdout.close()
    if archive.wait() != 0 or tar.returncode != 0:
        raise SetupError(f"exporting {rev} into {dest} failed")


@dataclass
class Side:
    name: str  # "old" / "new"
    label: str  # commit (and "working tree (dirty)") for the report
    tree: Path
    python: Path

    def node_cmd(self) -> str:
        return shlex.join(
            ["env", f"PYTHONPATH={self.tree}", str(self.python), "-m", "disq.node_main"]
        )

    def check_imports(self, cwd: Path) -> str:
        """Import disq.node_main the way the benchmarks will (PYTHONPATH, a neutral cwd) and
        make sure it comes from this side's tree (not from the editable install)."""
        code = (
            "import disq, disq.node_main, json; "
            "print(json.dumps([disq.__file__, disq.node_main.__file__]))"
        )
        cmd = [*shlex.split(self.node_cmd())[:3], "-c", code]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)
        if proc.returncode != 0:
            raise SetupError(
                f"{self.name} side: importing disq.node_main failed:\n{proc.stderr.strip()}"
            )
        files = [Path(f).resolve() for f in json.loads(proc.stdout.strip().splitlines()[-1])]
        want = (self.tree / "disq").resolve()
        for f in files:
            if want not in f.parents:
                raise SetupError(f"{self.name} side imports {f}, not from {want}")
        return str(files[0])

    def check_help(self, cwd: Path) -> None:
        """`-m disq.node_main -h` must mention the options the two benchmarks pass."""
        cmd = [*shlex.split(self.node_cmd()), "-h"]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)
        if proc.returncode != 0:
            raise SetupError(
                f"{self.name} side: `{shlex.join(cmd)}` failed:\n{proc.stderr.strip()[-2000:]}"
            )
        missing = [flag for flag in ("-l", "-p", "-b", "-f", "config") if flag not in proc.stdout]
        if missing:
            raise SetupError(f"{self.name} side: node_main -h does not mention {missing}")


# --------------------------------------------------------------------------------------------
# running the benchmarks


@dataclass
class Result:
    bench: str
    row: str
    ops: dict[str, list[float]] = field(default_factory=lambda: {"old": [], "new": []})
    failures: dict[str, list[str]] = field(default_factory=lambda: {"old": [], "new": []})
    errors: dict[str, int] = field(default_factory=lambda: {"old": 0, "new": 0})
    # The nodes' CPU time per operation (cluster rows): steadier than ops/s on a machine whose
    # two cores the nodes and the load generator share, so it resolves smaller changes.
    cpu_us: dict[str, list[float]] = field(default_factory=lambda: {"old": [], "new": []})


def read_rows(
    bench: str, path: Path
) -> list[tuple[str, float | None, str | None, int, float | None]]:
    """(row id, ops/s, error, loadgen errors, node CPU us per op) per row of a script's
    --json output."""
    data: dict[str, Any] = json.loads(path.read_text())
    out: list[tuple[str, float | None, str | None, int, float | None]] = []
    for row in data["rows"]:
        cell = row.get("disq", {}) if bench == "beanstalk" else row
        err = cell.get("error")
        ops = cell.get("ops_per_s")
        if err is None and ops is None:
            err = "no result"
        cpu_us = None
        node_cpu_s, n_ops = cell.get("node_cpu_s"), cell.get("ops")
        if not err and node_cpu_s and n_ops:
            cpu_us = 1e6 * sum(node_cpu_s) / n_ops
        out.append(
            (
                row["id"],
                None if err else float(ops),
                err,
                int(cell.get("errors") or 0),
                cpu_us,
            )
        )
    return out


def bench_cmd(bench: str, side: Side, rows: str, duration: float | None, out: Path) -> list[str]:
    script = SCRIPTS / BENCHES[bench][0]
    cmd = [str(side.python), str(script), "--rows", rows, "--json", str(out)]
    if duration is not None:
        cmd += ["--duration", f"{duration:g}"]
    if bench == "beanstalk":
        cmd += ["--only", "disq", "--disq-cmd", side.node_cmd()]
    else:
        cmd += ["--node-cmd", side.node_cmd(), "--no-calibrate"]
    return cmd


def run_one(
    bench: str,
    side: Side,
    rows: str,
    duration: float | None,
    out: Path,
    results: dict[tuple[str, str], Result],
) -> float:
    """Run one benchmark script for one side; add its rows to results. Returns seconds."""
    cmd = bench_cmd(bench, side, rows, duration, out)
    log(f"{bench} / {side.name}: {shlex.join(cmd)}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    t0 = time.monotonic()
    # the child's table goes to our stderr: our stdout is the comparison only
    proc = subprocess.run(cmd, stdout=sys.stderr, env=env, cwd=ROOT, check=False)
    took = time.monotonic() - t0
    if not out.exists():
        msg = f"{BENCHES[bench][0]} exited with {proc.returncode} and wrote no JSON"
        log(f"{bench} / {side.name}: {msg}")
        res = results.setdefault((bench, "(all rows)"), Result(bench, "(all rows)"))
        res.failures[side.name].append(msg)
        return took
    for row_id, ops, err, lg_errors, cpu_us in read_rows(bench, out):
        res = results.setdefault((bench, row_id), Result(bench, row_id))
        if ops is None:
            res.failures[side.name].append(err or "failed")
        else:
            res.ops[side.name].append(ops)
        if cpu_us is not None:
            res.cpu_us[side.name].append(cpu_us)
        res.errors[side.name] += lg_errors
    log(f"{bench} / {side.name}: done in {took:.0f} s (exit {proc.returncode})")
    return took


# --------------------------------------------------------------------------------------------
# report


def rel_spread(vals: list[float]) -> float:
    med = statistics.median(vals)
    return (max(vals) - min(vals)) / med if med > 0 else 0.0


def fmt_side(vals: list[float], fails: list[str], errors: int) -> tuple[str, str]:
    """(median, spread) columns of one side."""
    if not vals:
        return "FAIL", "-"
    med = fmt_int(statistics.median(vals))
    notes = []
    if fails:
        notes.append(f"{len(fails)} failed")
    if errors:
        notes.append(f"{errors:,} errors")
    if notes:
        med += f" ({', '.join(notes)})"
    spread = f"{fmt_int(min(vals))}-{fmt_int(max(vals))}"
    if len(vals) > 1:
        spread += f" (±{100 * rel_spread(vals) / 2:.0f}%)"
    return med, spread


def verdict(res: Result) -> tuple[str, str]:
    """(ratio, verdict) columns."""
    old, new = res.ops["old"], res.ops["new"]
    if not old or not new:
        return "-", "failed"
    o, n = statistics.median(old), statistics.median(new)
    if o <= 0:
        return "-", "failed"
    ratio = n / o
    band = rel_spread(old) + rel_spread(new)
    delta = f"{100 * (ratio - 1):+.0f}%"
    if abs(ratio - 1) <= band:
        text = f"within noise ({delta}, noise ±{100 * band:.0f}%)"
    else:
        text = f"{'faster' if ratio > 1 else 'slower'} ({delta}, noise ±{100 * band:.0f}%)"
    if res.failures["old"] or res.failures["new"] or res.errors["old"] or res.errors["new"]:
        text += "; some runs failed or had errors"
    return f"{ratio:.3f}x", text


# Issue 22's side-by-side run: disq at afdf44a beside Disque 1.0-rc1 (3 nodes from config
# files, AOF off, 100-byte bodies): Disque's ops/s as a multiple of afdf44a's, per row. With
# ``--base afdf44a`` the old side of a run is that anchor, measured in the same run, so the
# Disque column is the old side's median times this ratio.
DISQUE_ANCHOR = "afdf44a"
DISQUE_PER_ANCHOR = {
    "addjob-r3/c1/p1/mem": 5408 / 885,
    "addjob-r3/c50/p16/mem": 47_400 / 24_800,
    "addjob-r1/c50/p16/mem": 329_000 / 124_000,
    "getjob-ackjob/c50/p16/mem": 47_700 / 29_800,
}


def render_disque(results: list[Result]) -> str:
    """Disque calibrated on the anchor's side of this run, and the new side's share of it."""
    out = [
        "| row | afdf44a ops/s (this run) | Disque / afdf44a (issue 22) | Disque, calibrated "
        "| new ops/s | new / Disque |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        factor = DISQUE_PER_ANCHOR.get(r.row)
        if r.bench != "cluster" or factor is None or not r.ops["old"] or not r.ops["new"]:
            continue
        old, new = statistics.median(r.ops["old"]), statistics.median(r.ops["new"])
        out.append(
            f"| {r.row} | {fmt_int(old)} | {factor:.2f}x | {fmt_int(old * factor)} "
            f"| {fmt_int(new)} | {new / (old * factor):.2f} |"
        )
    return "\n".join(out) + "\n" if len(out) > 2 else ""


def render_cpu(results: list[Result]) -> str:
    """Node CPU per operation, old against new (rows that report it); empty if none do."""
    rows = [r for r in results if r.cpu_us["old"] and r.cpu_us["new"]]
    if not rows:
        return ""
    out = [
        "| bench | row | old node CPU us/op (median) | new node CPU us/op (median) | new / old |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        o, n = statistics.median(r.cpu_us["old"]), statistics.median(r.cpu_us["new"])
        out.append(
            f"| {r.bench} | {r.row} | {o:.1f} ({min(r.cpu_us['old']):.1f}-"
            f"{max(r.cpu_us['old']):.1f}) | {n:.1f} ({min(r.cpu_us['new']):.1f}-"
            f"{max(r.cpu_us['new']):.1f}) | {n / o:.3f}x |"
        )
    return "\n".join(out) + "\n"


def render(results: list[Result], repeat: int) -> str:
    hdr = [
        "bench",
        "row",
        f"old ops/s (median of {repeat})",
        "old min-max",
        f"new ops/s (median of {repeat})",
        "new min-max",
        "new / old",
        "verdict",
    ]
    out = ["| " + " | ".join(hdr) + " |"]
    out.append("| " + " | ".join(["---", "---", "---:", "---:", "---:", "---:", "---:", "---"]))
    out[-1] += " |"
    for res in results:
        cols = [res.bench, res.row]
        for side in ("old", "new"):
            cols += list(fmt_side(res.ops[side], res.failures[side], res.errors[side]))
        cols += list(verdict(res))
        out.append("| " + " | ".join(cols) + " |")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark an old commit against the working tree, interleaved.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument(
        "--base",
        help="old side: any git rev (default: merge-base of HEAD and origin/main, else HEAD~1)",
    )
    p.add_argument("--which", choices=["beanstalk", "cluster", "both"], default="both")
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds per measured run (default: each script's own, 3 s beanstalk, 5 s cluster)",
    )
    p.add_argument(
        "--repeat", type=int, default=3, help="runs per side, interleaved (default %(default)s)"
    )
    p.add_argument(
        "--rows-beanstalk",
        default=DEFAULT_ROWS,
        help="bench_beanstalk.py --rows patterns (default %(default)r)",
    )
    p.add_argument(
        "--rows-cluster",
        default=DEFAULT_ROWS,
        help="bench_cluster.py --rows patterns (default %(default)r)",
    )
    p.add_argument(
        "--python",
        type=Path,
        default=VENV_PY if VENV_PY.exists() else Path(sys.executable),
        help="interpreter for both sides and the scripts (default %(default)s)",
    )
    p.add_argument("--markdown", type=Path, help="also write the report to this markdown file")
    p.add_argument(
        "--keep-tmp", action="store_true", help="keep the exported tree and the JSON files"
    )
    # debugging: a directory to use as the new side instead of the working tree (e.g. a second
    # export of the same commit, to see the noise of an A/A comparison)
    p.add_argument("--new-tree", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeat < 1 or (args.duration is not None and args.duration <= 0):
        p.error("--repeat and --duration must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    benches = ["beanstalk", "cluster"] if args.which == "both" else [args.which]
    rows = {"beanstalk": args.rows_beanstalk, "cluster": args.rows_cluster}
    python = args.python.absolute()  # not resolved: the venv's python is a symlink
    started = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()[0]
    if load_before > 0.5:
        log(f"warning: load average is {load_before:.2f} before starting; results will be noisy")
    if args.repeat == 1:
        log("warning: --repeat 1 gives no spread, so any difference is 'faster'/'slower'")

    tmp = Path(tempfile.mkdtemp(prefix="disq-before-after-"))
    results: dict[tuple[str, str], Result] = {}
    timings: dict[str, list[float]] = {}
    try:
        if args.base:
            base, why = args.base, "--base"
        else:
            base, why = default_base()
        base_full = git("rev-parse", "--verify", f"{base}^{{commit}}")
        old_label = describe(base_full)
        log(f"old side: {old_label} ({why})")
        old_tree = tmp / "old"
        export_tree(base_full, old_tree)

        if args.new_tree:
            new_tree = args.new_tree.resolve()
            new_label = f"tree at {new_tree} (--new-tree)"
        else:
            new_tree = ROOT
            dirty = bool(git("status", "--porcelain"))
            new_label = describe("HEAD") + (" + working tree (dirty)" if dirty else "")
        log(f"new side: {new_label}")

        sides = [Side("old", old_label, old_tree, python), Side("new", new_label, new_tree, python)]
        neutral = tmp / "cwd"
        neutral.mkdir()
        for side in sides:
            log(f"{side.name} side imports {side.check_imports(neutral)}")
            side.check_help(neutral)

        jsondir = tmp / "json"
        jsondir.mkdir()
        t_start = time.monotonic()
        for bench in benches:
            for rep in range(args.repeat):
                for side in sides:  # interleaved, so drifting load hits both sides
                    log(f"=== {bench}: run {rep + 1}/{args.repeat}, {side.name} side")
                    out = jsondir / f"{bench}-{side.name}-{rep + 1}.json"
                    took = run_one(bench, side, rows[bench], args.duration, out, results)
                    timings.setdefault(f"{bench}/{side.name}", []).append(took)
        elapsed = time.monotonic() - t_start
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.keep_tmp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    # stable: rows stay in the scripts' own order within each benchmark
    ordered = sorted(results.values(), key=lambda r: benches.index(r.bench))
    table = render(ordered, args.repeat)
    exe = Path(sys.executable)
    if exe.is_relative_to(ROOT):
        exe = exe.relative_to(ROOT)
    cmdline = shlex.join([str(exe), *sys.argv])
    durations = ", ".join(
        f"{b} {args.duration if args.duration is not None else BENCHES[b][1]:g} s" for b in benches
    )
    per_run = ", ".join(f"{k} {statistics.median(v):.0f} s" for k, v in timings.items())
    lines = [
        f"Command: `{cmdline}`",
        "",
        f"Date: {started:%Y-%m-%d %H:%M} UTC; machine: {machine_info()}; "
        f"1-min load average before the run: {load_before:.2f}",
        "",
        f"- old: {sides[0].label} (exported into a temporary directory): "
        f"`env PYTHONPATH=OLD_TREE {python} -m disq.node_main`",
        f"- new: {sides[1].label}: `{sides[1].node_cmd()}`",
        "- scripts (the working tree's, for both sides): "
        + ", ".join(f"`scripts/{BENCHES[b][0]} --rows '{rows[b]}'`" for b in benches)
        + ("" if "beanstalk" not in benches else " (bench_beanstalk with `--only disq`)"),
        f"- {args.repeat} run(s) per side, interleaved old/new; measured run length: {durations}; "
        f"each script run took (median): {per_run}; total {elapsed:.0f} s",
        "- ops/s = median over the runs; min-max = spread over the runs (± half of it, in % of "
        "the median); verdict: within noise when |new/old - 1| <= old spread + new spread "
        "(each (max - min) / median)",
        "",
        table.rstrip("\n"),
    ]
    if base_full == git("rev-parse", "--verify", f"{DISQUE_ANCHOR}^{{commit}}"):
        disque = render_disque(ordered)
        if disque:
            lines += [
                "",
                "Disque calibrated on the anchor's side of this run (issue 22's ratios):",
                "",
                disque.rstrip("\n"),
            ]
    cpu_table = render_cpu(ordered)
    if cpu_table:
        lines += [
            "",
            "The nodes' CPU time per operation (all three nodes, from /proc; lower is better; "
            "min-max in brackets):",
            "",
            cpu_table.rstrip("\n"),
        ]
    report = "\n".join(lines) + "\n"
    print()
    print(report, end="")
    if args.markdown:
        args.markdown.write_text(report)
        log(f"wrote {args.markdown}")
    failed = any(r.failures["old"] or r.failures["new"] for r in ordered)
    return 1 if failed or not ordered else 0


if __name__ == "__main__":
    sys.exit(main())

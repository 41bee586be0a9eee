"""disq on Spark: ``disq.spark.session()`` and the ``disq`` data source (see sink.py).

pyspark and pyarrow are an extra (``pip install 'disq-server[spark]'``) and need Java 17+;
nothing here is imported by ``import disq``.

    from disq.spark import session
    spark = session()                       # local[*], this Python for the workers, quiet logs
    df.write.format("disq").option("nodes", "127.0.0.1:7710").option("queue", "q").save()
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

# The line of a disq error inside the text of a Spark exception (a task's or a data source
# worker's Python traceback, carried by the JVM): its class and message.
_DISQ_ERROR = re.compile(
    r"^(?:disq\.[\w.]+\.)?((?:Disq\w*|Unavailable|InvalidArgument|NoRepl|Auth)\w*Error): (.+)$",
    re.M,
)


def register(spark: Any) -> None:
    """Make ``format("disq")`` known to a session (``session()`` does it)."""
    from disq.spark.events_source import DisqEventsDataSource
    from disq.spark.sink import DisqDataSource

    spark.dataSource.register(DisqDataSource)
    spark.dataSource.register(DisqEventsDataSource)


def disq_error_line(exc: BaseException) -> str | None:
    """``"DisqSinkError: row 3 of partition 1: ..."`` when ``exc`` (a Spark exception, whose
    text holds the Python traceback of the task or worker that failed) carries a disq error;
    the last one, the error the traceback ends with."""
    found = _DISQ_ERROR.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    return f"{name}: {message.strip()}"


def _default_log_file(app_name: str) -> Path:
    safe = re.sub(r"[^\w.-]", "_", app_name) or "spark"
    return Path(tempfile.gettempdir()) / "disq-spark" / f"{safe}-{os.getpid()}.log"


def session(
    app_name: str = "disq",
    master: str | None = None,
    conf: dict[str, str] | None = None,
    log_level: str = "WARN",
    log_file: str | Path | None = None,
) -> Any:
    """A SparkSession with the disq data source registered. ``master`` defaults to
    ``local[*]`` unless spark-submit chose one; the workers run this interpreter, so they
    import the same disq.

    Spark's own output (its log at ``log_level``, the JVM's warnings, the Java traces of
    failed tasks) goes to ``log_file`` (default ``<tmp>/disq-spark/<app>-<pid>.log``; ``"-"``:
    the console, as plain PySpark), not to the console: what the user sees of a failed write
    is the Python exception, and a script that dies of one prints the disq error first. The
    file's path is the session's ``spark.disq.logFile`` setting. Under spark-submit (the JVM
    started this driver) the console is spark-submit's, and left alone."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    settings = {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.showConsoleProgress": "false",
    }
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is not None:
        settings["spark.master"] = master
    elif "spark.master" not in (conf or {}) and not under_submit:
        # Under spark-submit the JVM started this driver (and set the gateway port): its
        # --master stands. Run as a plain script, local mode is the default.
        settings["spark.master"] = "local[*]"
    if settings.get("spark.master", "").startswith("local"):
        # Local mode listens on loopback only; naming it spares the hostname lookup and
        # Spark's warning that the hostname resolves to a loopback address.
        settings["spark.driver.bindAddress"] = "127.0.0.1"
        settings["spark.driver.host"] = "127.0.0.1"
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings.update(conf or {})
    log_path: Path | None = None
    if str(log_file) != "-" and not under_submit and SparkContext._gateway is None:
        log_path = Path(log_file) if log_file is not None else _default_log_file(app_name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        settings["spark.disq.logFile"] = str(log_path)
        _start_jvm(SparkConf().setAll(list(settings.items())), log_path)
    builder = SparkSession.builder
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    if log_path is not None:
        _install_excepthook(str(log_path))
    return spark


def _start_jvm(conf: Any, log_path: Path) -> None:
    """Start Spark's JVM (as PySpark would) with its stdout and stderr in ``log_path``."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    with open(log_path, "ab") as log:  # the JVM keeps its own descriptor
        gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})  # type: ignore[no-untyped-call]
    SparkContext._ensure_initialized(gateway=gateway)


_log_file: list[str] = []  # where the JVM writes, once session() started it; [] until then


def _install_excepthook(log_file: str) -> None:
    """A script that dies of a Spark exception carrying a disq error prints that error as its
    first line (then where Spark's log is, then the usual traceback)."""
    first = not _log_file
    _log_file[:] = [log_file]
    if not first:
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        line = disq_error_line(exc)
        if line is not None:
            sys.stderr.write(f"disq: {line}\n")
            sys.stderr.write(f"(Spark's log, with the Java traces: {_log_file[0]})\n")
        previous(kind, exc, tb)

    sys.excepthook = hook

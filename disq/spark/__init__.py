"""disq on Spark: ``disq.spark.session()`` and the ``disq`` data source (see sink.py).

pyspark and pyarrow are an extra (``pip install 'disq-server[spark]'``) and need Java 17+;
nothing here is imported by ``import disq``.

    from disq.spark import session
    spark = session()                       # local[*], this Python for the workers, quiet logs
    df.write.format("disq").option("nodes", "127.0.0.1:7710").option("queue", "q").save()
"""

from __future__ import annotations

import os
import sys
from typing import Any


def register(spark: Any) -> None:
    """Make ``format("disq")`` known to a session (``session()`` does it)."""
    from disq.spark.events_source import DisqEventsDataSource
    from disq.spark.sink import DisqDataSource

    spark.dataSource.register(DisqDataSource)
    spark.dataSource.register(DisqEventsDataSource)


def session(
    app_name: str = "disq",
    master: str | None = None,
    conf: dict[str, str] | None = None,
    log_level: str = "WARN",
) -> Any:
    """A SparkSession with the disq data source registered. ``master`` defaults to
    ``local[*]`` unless spark-submit chose one; the workers run this interpreter, so they
    import the same disq."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif "spark.master" not in (conf or {}) and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Under spark-submit the JVM started this driver (and set the gateway port): its
        # --master stands. Run as a plain script, local mode is the default.
        builder = builder.master("local[*]")
    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.bindAddress": "127.0.0.1",  # local mode listens on loopback only
        "spark.driver.host": "127.0.0.1",
    }
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark

"""disq's benchmark harness: ``python -m bench <subcommand>``.

Every subcommand runs disq and its reference (beanstalkd, Disque, Redis, the SDK's own path,
another build of disq) side by side in one run, on this machine, and prints one report: the
machine line, then tables whose last columns are the ratios (``bench/report.py``). Nodes
start through ``cluster/lab.py``; the C load generators live in ``bench/loadgen/`` and are
built on demand into ``build/loadgen/``. ``python -m bench --help`` lists the subcommands;
docs/benchmarks.md has the figures and the command behind each.
"""

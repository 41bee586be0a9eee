"""The cluster lab: run a real multi-process disq cluster on this machine and hurt it.

* :mod:`cluster.resp_client`: a small synchronous RESP2 client (the lab's only wire code).
* :mod:`cluster.lab`: start, kill -9, pause, partition and restart local nodes.
* :mod:`cluster.checker`: a pure total-queue history checker (Jepsen's ``total-queue``).
* :mod:`cluster.jepsen`: the Jepsen-style workload that ties them together.

This package is test tooling, not part of the ``disq`` distribution: run it from the
repository root (``python -m cluster.lab``, ``python -m cluster.jepsen``).
"""

"""Settings for the whole suite, applied before any test module imports grpc.

gRPC's fork support (grpcio 1.81 and later, grpc/grpc#43055): when the test process has
live channels (the SDK's in-process clients) and a test starts a subprocess with
``preexec_fn`` (the CLI's ``top``, Spark's gateway, ...), the fork handler restarts gRPC's
poller in the child before its ``exec``, and the child can die on ``epoll_wait: Bad file
descriptor`` (seen in two full runs: Spark's gateway and ``disq top`` exited at once). The
suite forks only to exec, so it turns fork support off, as gRPC's maintainers advise for
fork-then-exec programs.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

"""The Dramatiq broker's first home: ``from disq.dramatiq import DisqBroker`` keeps working.

The broker lives in :mod:`disq.integrations.dramatiq`, beside the kombu transport it shares
the ``disq://`` URL, the options and the RESP adds with.
"""

from __future__ import annotations

from disq.integrations.dramatiq import MAX_ENQUEUE_ATTEMPTS, DisqBroker, DisqBrokerError

__all__ = ["MAX_ENQUEUE_ATTEMPTS", "DisqBroker", "DisqBrokerError"]

"""kombu's own integration suite (t/integration/common.py of the installed kombu's sdist)
against a 3-node disq cluster, wired as kombu's test_redis.py / test_py_amqp.py wire theirs:
a ``connection`` fixture (the README's URL: the three nodes, no options) and an
``invalid_connection`` one (a port nobody listens on).

The suite is not in this repository: scripts/ensure_kombu_suite.sh downloads the sdist once
into .venv/share/kombu-suite/ (``make test`` runs it; this module runs it too when the file
is missing). Priorities are AMQP's order (``PRIORITY_ORDER = 'asc'``: a higher number is
served first), as the transport documents.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kombu
import pytest
from conftest import free_port
from task_apps import disq_url

from cluster.lab import Lab

ROOT = Path(__file__).resolve().parents[2]
SUITE_DIR = ROOT / ".venv" / "share" / "kombu-suite"
if not (SUITE_DIR / "kombu_integration_common.py").exists():
    subprocess.run([str(ROOT / "scripts" / "ensure_kombu_suite.sh")], check=True)
sys.path.insert(0, str(SUITE_DIR))

from kombu_integration_common import (  # noqa: E402  (found through SUITE_DIR)
    BaseExchangeTypes,
    BaseMessage,
    BasePriority,
    BaseTimeToLive,
    BasicFunctionality,
)


@pytest.fixture
def connection(lab3: Lab) -> kombu.Connection:
    return kombu.Connection(disq_url(lab3))


@pytest.fixture
def invalid_connection() -> kombu.Connection:
    return kombu.Connection(f"disq://127.0.0.1:{free_port()}")


class TestDisqBasicFunctionality(BasicFunctionality):
    pass


class TestDisqBaseExchangeTypes(BaseExchangeTypes):
    pass


class TestDisqTimeToLive(BaseTimeToLive):
    pass


class TestDisqPriority(BasePriority):
    PRIORITY_ORDER = "asc"


class TestDisqMessage(BaseMessage):
    pass

"""Disque job ids: ``D-<node8>-<24 chars>-<ttl4hex>`` (reference/anchors.md 2.2).

40 characters. ``node8`` is the first 8 hex characters of the creating node's id, so a client
can tell where a job was born (consumers use it to route ACKs). The 24 characters are 18 random
bytes in base64 (144 bits: collisions are not a practical concern). The last 4 hex digits are
the TTL in minutes, capped at 65535, forced odd when the job may be redelivered (retry > 0) and
even for at-most-once jobs: a node that does not know an id can tell from the id alone whether a
dummy ACK is worth creating for it (Disque does exactly this).

Pure: the random bytes come from the caller's ``random.Random``, so the simulator replays ids.
"""

from __future__ import annotations

import random
from binascii import b2a_base64

JOB_ID_LEN = 40
_MAX_TTL_MINUTES = 0xFFFF
# The TTL's 4 hex digits as two table look-ups: compiled, ``f"{minutes:04x}"`` is a
# ``str.format`` call (an argument tuple, the format spec parsed), which was half of
# make_job_id's time and 8% of a node's CPU under ADDJOB REPLICATE 1 (issue 33).
_HEX2 = [f"{i:02x}" for i in range(256)]


class BadJobId(ValueError):
    """Disque answers ``-BADID Invalid Job ID format.``"""

    code = "BADID"


def make_job_id(node_id: str, rng: random.Random, ttl_s: int, retry_s: int) -> str:
    minutes = min(max(ttl_s, 0) // 60, _MAX_TTL_MINUTES)
    if retry_s > 0:
        minutes |= 1
    else:
        minutes &= ~1
    # rng.randbytes(18) and base64.b64encode, without their two Python-level wrappers (the
    # same bytes, so the same ids from the same seed): this runs once per ADDJOB.
    body = b2a_base64(rng.getrandbits(144).to_bytes(18, "little"), newline=False)
    return f"D-{node_id[:8]}-{body.decode('ascii')}-{_HEX2[minutes >> 8]}{_HEX2[minutes & 0xFF]}"


def validate_job_id(job_id: str) -> str:
    """Disque's check: length 40, ``D`` at 0, ``-`` at 1, 10 and 35; nothing more."""
    if (
        len(job_id) != JOB_ID_LEN
        or job_id[0] != "D"
        or job_id[1] != "-"
        or job_id[10] != "-"
        or job_id[35] != "-"
    ):
        raise BadJobId("Invalid Job ID format.")
    return job_id


def node_prefix(job_id: str) -> str:
    """The 8 hex characters of the node that created the job."""
    return job_id[2:10]


def ttl_minutes(job_id: str) -> int:
    return int(job_id[36:40], 16)


def may_be_redelivered(job_id: str) -> bool:
    """Odd TTL field: at-least-once (retry > 0); even: at-most-once."""
    return ttl_minutes(job_id) & 1 == 1

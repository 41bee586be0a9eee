"""Idempotent ADDJOB (disq's addition): a key repeated on a queue within the window adds nothing
and answers the first job's id.

Keys are remembered node-wide in ``_idem``, oldest first (insertion order), and travel two
ways: inside the job (REPLJOB, YOURJOBS, the AOF's LOADJOB), so every holder knows its job's
key, and by IDEMKEYS once the add is done, so a retry that reaches a node without a copy
answers the same id. The ADDJOBs that repeat a key while the first add still waits for its
copies wait with it (``_followers``, in blocked.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from disq.core.disque.job import DJob
from disq.core.messages import IdemKeys, Message

if TYPE_CHECKING:
    from disq.core.disque.api import ClusterView

# Idempotent adds: a key is remembered this long after its add (node-wide), for at most
# IDEM_MAX_KEYS keys (the oldest go first): a retry after that adds a second job.
IDEM_WINDOW_MS = 3_600_000
IDEM_MAX_KEYS = 1_000_000
IDEM_KEY_MAX_BYTES = 256


class IdempotencyMixin:
    """The idempotency keys of DisqueCore."""

    view: ClusterView
    # (queue, idempotency key) -> (job id, until), insertion order = age.
    _idem: dict[tuple[str, str], tuple[str, int]]
    idem_window_ms: int

    if TYPE_CHECKING:  # provided by DisqueCore

        def _send(self, node: str, msg: Message) -> None: ...

    def _remember_key(self, j: DJob, now_ms: int) -> None:
        if not j.idem_key:
            return
        k = (j.queue, j.idem_key)
        self._idem.pop(k, None)
        self._idem[k] = (j.id, now_ms + self.idem_window_ms)
        if len(self._idem) > IDEM_MAX_KEYS:
            del self._idem[next(iter(self._idem))]

    def _known_key(self, queue: str, key: str, now_ms: int) -> str | None:
        """The id of the job first added with this key, if still in the window."""
        self._expire_keys(now_ms)
        hit = self._idem.get((queue, key))
        return hit[0] if hit is not None else None

    def _expire_keys(self, now_ms: int) -> None:
        idem = self._idem
        while idem:
            k = next(iter(idem))
            if idem[k][1] > now_ms:
                return
            del idem[k]

    def _announce_key(self, j: DJob) -> None:
        """The add is done (its copies exist): every peer learns the key, so a retry that
        reaches a node without a copy answers this id too. Sent only now, never while the
        add may still fail, or a peer could answer the id of a job that never was."""
        if j.idem_key:
            msg = IdemKeys([j.queue], [j.idem_key], [j.id])
            for node in self.view.all_peers():
                self._send(node, msg)

    def _on_idem_keys(self, now_ms: int, sender: str, msg: IdemKeys) -> None:
        until = now_ms + self.idem_window_ms
        idem = self._idem
        for queue, key, job_id in zip(msg.queues, msg.keys, msg.job_ids, strict=False):
            if (queue, key) not in idem:
                idem[(queue, key)] = (job_id, until)
        while len(idem) > IDEM_MAX_KEYS:
            del idem[next(iter(idem))]

    def _forget_key(self, j: DJob) -> None:
        """The add failed (NOREPL, cancelled): a retry with the key must add the job."""
        if j.idem_key:
            hit = self._idem.get((j.queue, j.idem_key))
            if hit is not None and hit[0] == j.id:
                del self._idem[(j.queue, j.idem_key)]

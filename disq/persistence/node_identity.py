"""The node's identity in its data directory: 40 hex characters, random at first start.

A node that restarts on the same directory rejoins the cluster with the same id (its peers
know it, and job ids carry its first 8 characters), so the id is written once, atomically,
and changed only by CLUSTER RESET HARD (Disque's new node name, ``save_node_id``). Kept in
``node.json`` next to the AOF, with room for the cluster view.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from disq.persistence.fs import replace_durably

NODE_FILE = "node.json"


class NodeIdentityError(Exception):
    code = "NODE_IDENTITY"


def _valid(node_id: object) -> bool:
    return (
        isinstance(node_id, str)
        and len(node_id) == 40
        and all(c in "0123456789abcdef" for c in node_id)
    )


def load_or_create_node_id(data_dir: Path) -> str:
    path = data_dir / NODE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        data = None
    except (OSError, ValueError) as exc:
        raise NodeIdentityError(f"{path}: unreadable node identity ({exc})") from exc
    if data is not None:
        node_id = data.get("node_id") if isinstance(data, dict) else None
        if not _valid(node_id):
            raise NodeIdentityError(f"{path}: node_id must be 40 lowercase hex characters")
        assert isinstance(node_id, str)
        return node_id
    node_id = os.urandom(20).hex()  # secrets.token_hex's bytes, without its hmac import
    save_node_id(data_dir, node_id)
    return node_id


def save_node_id(data_dir: Path, node_id: str) -> None:
    """Write ``node_id`` as the directory's node, atomically (a new one, or a hard reset's)."""
    if not _valid(node_id):
        raise NodeIdentityError("node_id must be 40 lowercase hex characters")
    data_dir.mkdir(parents=True, exist_ok=True)
    replace_durably(data_dir / NODE_FILE, json.dumps({"node_id": node_id}).encode())

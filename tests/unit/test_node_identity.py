"""A node keeps its id across restarts; a damaged identity file stops it clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from disq.persistence.node_identity import (
    NODE_FILE,
    NodeIdentityError,
    load_or_create_node_id,
)


def test_created_once_and_kept(tmp_path: Path) -> None:
    first = load_or_create_node_id(tmp_path / "d")
    assert len(first) == 40 and int(first, 16) >= 0
    assert load_or_create_node_id(tmp_path / "d") == first
    assert load_or_create_node_id(tmp_path / "other") != first


@pytest.mark.parametrize("text", ["{", '{"node_id": "xyz"}', "[]", '{"node_id": 5}'])
def test_damaged_file_is_an_error(tmp_path: Path, text: str) -> None:
    (tmp_path / NODE_FILE).write_text(text)
    with pytest.raises(NodeIdentityError):
        load_or_create_node_id(tmp_path)

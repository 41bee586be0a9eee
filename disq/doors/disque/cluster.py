"""Cluster commands: HELLO, CLUSTER."""

from __future__ import annotations

from disq.doors.disque.client import Client
from disq.doors.disque.node_api import NodeEntry
from disq.doors.disque.numbers import parse_ll
from disq.doors.disque.replies import OK, SYNTAX_ERR, _bulk, _err_arg


def _hello(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """``[1, myid, [id, ip, port, priority]...]``; port and priority are bulk strings."""
    node = c.node
    nodes = node.cluster_nodes()
    out = [b"*%d\r\n:1\r\n" % (2 + len(nodes)), _bulk(node.core.view.my_id.encode())]
    for e in nodes:
        out.append(b"*4\r\n")
        out.append(_bulk(e.node_id.encode()))
        out.append(_bulk(e.host.encode()))
        out.append(_bulk(b"%d" % e.client_port))
        out.append(_bulk(b"%d" % e.priority))
    return b"".join(out)


_NODE_FLAGS = {"suspect": "fail?", "dead": "fail"}


def _node_line(e: NodeEntry, my_id: str) -> bytes:
    """clusterGenNodeDescription: ``id ip:port flags ping_sent pong_received link``. disq
    has no ping timestamps to show (SWIM probes are not per-pair), so they are 0."""
    flags = []
    if e.node_id == my_id:
        flags.append("myself")
    if e.state in _NODE_FLAGS:
        flags.append(_NODE_FLAGS[e.state])
    if e.leaving:
        flags.append("leaving")
    link = "connected" if e.node_id == my_id or e.priority != 5 else "disconnected"
    return (
        f"{e.node_id} {e.host}:{e.client_port} {','.join(flags) or 'noflags'} 0 0 {link}\n"
    ).encode()


def _cluster(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    node = c.node
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"meet" and argc == 4:
        port = parse_ll(argv[3])
        if port is None:
            return _err_arg(b"ERR Invalid TCP port specified: ", argv[3])
        if not node.cluster_meet(argv[2].decode("utf-8", "replace"), port):
            return _err_arg(b"ERR Invalid node address specified: ", argv[2] + b":" + argv[3])
        return OK
    if sub == b"nodes" and argc == 2:
        my_id = node.core.view.my_id
        return _bulk(b"".join(_node_line(e, my_id) for e in node.cluster_nodes()))
    if sub == b"myid" and argc == 2:
        return _bulk(node.core.view.my_id.encode())
    if sub == b"info" and argc == 2:
        return _bulk("".join(f"{k}:{v}\r\n" for k, v in node.cluster_info()).encode())
    if sub == b"saveconfig" and argc == 2:
        node.cluster_saveconfig()
        return OK
    if sub == b"forget" and argc == 3:
        if len(argv[2]) != 40:
            return b"-ERR Invalid node identifier\r\n"
        target = argv[2].decode("latin-1")
        if target == node.core.view.my_id:
            return b"-ERR I tried hard but I can't forget myself...\r\n"
        if all(e.node_id != target for e in node.cluster_nodes()):
            return _err_arg(b"ERR Unknown node ", argv[2])
        node.cluster_forget(target)
        return OK
    if sub == b"reset" and argc in (2, 3):
        hard = False
        if argc == 3:
            mode = argv[2].lower()
            if mode == b"hard":
                hard = True
            elif mode != b"soft":
                return SYNTAX_ERR
        node.cluster_reset(hard)
        return OK
    if sub == b"leaving" and argc in (2, 3):
        if argc == 2:
            return b"+yes\r\n" if node.cluster_leaving(None) else b"+no\r\n"
        flag = argv[2].lower()
        if flag == b"yes":
            node.cluster_leaving(True)
            return OK
        if flag == b"no":
            node.cluster_leaving(False)
            return OK
        return b"-ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'\r\n"
    return b"-ERR Wrong CLUSTER subcommand or number of arguments\r\n"

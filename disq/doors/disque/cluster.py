"""Cluster commands: HELLO (Disque's, and Redis 6's handshake), CLUSTER."""

from __future__ import annotations

from disq.doors.disque.client import Client
from disq.doors.disque.node_api import DISQUE_VERSION, NodeEntry
from disq.doors.disque.numbers import parse_ll
from disq.doors.disque.replies import OK, SYNTAX_ERR, _bulk, _err_arg
from disq.protocol import resp

# Redis 7's helloCommand errors, byte for byte.
NOPROTO_ERR = b"-NOPROTO unsupported protocol version\r\n"
PROTO_NOT_INT_ERR = b"-ERR Protocol version is not an integer or out of range\r\n"
WRONGPASS_ERR = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
HELLO_NOAUTH_ERR = (
    b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    b"HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
    b"select the RESP protocol version at the same time\r\n"
)
BAD_NAME_ERR = b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"


def _hello(c: Client, argv: list[bytes], now_ms: int) -> bytes:
    """Disque's HELLO without arguments; with a protocol version, Redis 6's handshake."""
    if len(argv) > 1:
        return _hello_handshake(c, argv)
    return _disque_hello(c)


def hello_before_auth(c: Client, argv: list[bytes]) -> bytes:
    """HELLO with arguments from a client that has not authenticated yet: Redis runs it (it
    has the ``no-auth`` flag) so that ``HELLO 3 AUTH default pass`` can log in; without AUTH
    it answers HELLO's own NOAUTH error. The RESP door calls this when the command table's
    authentication check refused HELLO."""
    return _hello_handshake(c, argv)


def _disque_hello(c: Client) -> bytes:
    """``[1, myid, [id, ip, port, priority]...]``; port and priority are bulk strings."""
    node = c.node
    nodes = node.cluster_nodes()
    out = [b"*%d\r\n:1\r\n" % (2 + len(nodes)), _bulk(node.core.my_id.encode())]
    for e in nodes:
        out.append(b"*4\r\n")
        out.append(_bulk(e.node_id.encode()))
        out.append(_bulk(e.host.encode()))
        out.append(_bulk(b"%d" % e.client_port))
        out.append(_bulk(b"%d" % e.priority))
    return b"".join(out)


def _hello_handshake(c: Client, argv: list[bytes]) -> bytes:
    """``HELLO protover [AUTH user pass] [SETNAME name]``, as Redis 7's helloCommand: the
    version, then the options (all parsed before any acts), then AUTH, then the
    authentication check, then SETNAME; only then the switch and the reply, so a refused
    HELLO leaves the connection's protocol and name as they were.

    The only user is Redis's ``default``: it has the node's ``requirepass``, or no password
    at all (any password is accepted, as for Redis's ``nopass`` default user)."""
    # getLongLongFromObjectOrReply: Redis 7's strict string2ll, not Disque's strtoll.
    ver = resp.string2ll(argv[1])
    if ver is None:
        return PROTO_NOT_INT_ERR
    if ver not in (2, 3):
        return NOPROTO_ERR
    auth: tuple[bytes, bytes] | None = None
    name: bytes | None = None
    j = 2
    n = len(argv)
    while j < n:
        opt = argv[j].lower()
        more = n - 1 - j
        if opt == b"auth" and more >= 2:
            auth = (argv[j + 1], argv[j + 2])
            j += 3
        elif opt == b"setname" and more >= 1:
            name = argv[j + 1]
            j += 2
        else:
            return _err_arg(b"ERR Syntax error in HELLO option '", argv[j], b"'")
    node = c.node
    pw = node.requirepass
    if auth is not None:
        import hmac  # here: hashlib's OpenSSL set-up is 2 ms of every start

        user, password = auth
        ok = user == b"default" and (
            not pw or hmac.compare_digest(password, pw.encode("utf-8", "surrogateescape"))
        )
        if not ok:
            # Redis 7 leaves the connection as it was on a failed AUTH (unlike Disque's
            # AUTH command, which logs it out): only success changes it.
            return WRONGPASS_ERR
        c.authenticated = True
    if pw and not c.authenticated:
        return HELLO_NOAUTH_ERR
    if name is not None:
        # clientSetName: an empty name clears it; otherwise only printable, no spaces.
        if name and not all(0x21 <= x <= 0x7E for x in name):
            return BAD_NAME_ERR
        c.name = name or None
    c.protocol = ver
    # Redis's keys in Redis's order. "server" names what answers (clients only show it);
    # "mode" is standalone because "cluster" would tell a Redis client to route by hash
    # slots, which Disque's cluster does not have: any node takes any command.
    fields: list[tuple[bytes, bytes | int | list[bytes]]] = [
        (b"server", b"disque"),
        (b"version", DISQUE_VERSION.encode()),
        (b"proto", ver),
        (b"id", c.cid),
        (b"mode", b"standalone"),
        (b"role", b"master"),
        (b"modules", []),
    ]
    if ver == 3:
        return resp.encode3(dict(fields))
    return resp.encode([x for pair in fields for x in pair])


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
        my_id = node.core.my_id
        text = b"".join(_node_line(e, my_id) for e in node.cluster_nodes())
        # Redis 6+ sends this text as a verbatim string in RESP3, as INFO's.
        return resp.verbatim(text) if c.protocol == 3 else _bulk(text)
    if sub == b"myid" and argc == 2:
        return _bulk(node.core.my_id.encode())
    if sub == b"info" and argc == 2:
        text = "".join(f"{k}:{v}\r\n" for k, v in node.cluster_info()).encode()
        return resp.verbatim(text) if c.protocol == 3 else _bulk(text)
    if sub == b"saveconfig" and argc == 2:
        node.cluster_saveconfig()
        return OK
    if sub == b"forget" and argc == 3:
        if len(argv[2]) != 40:
            return b"-ERR Invalid node identifier\r\n"
        target = argv[2].decode("latin-1")
        if target == node.core.my_id:
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

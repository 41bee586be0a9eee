/*
 * resp_loadgen: a small epoll-based load generator for Disque's RESP protocol (ADDJOB, GETJOB,
 * ACKJOB), the RESP2 counterpart of bench/loadgen/loadgen.c.
 *
 * Build:  gcc -O2 -Wall -o resp_loadgen bench/loadgen/resp_loadgen.c (python -m bench builds it)
 *
 * Usage:
 *   resp_loadgen --ports 7711,7712,7713 --conns 50 --pipeline 16 --ops 1000000 \
 *                --workload addjob|getjob-ackjob|addjob-getjob-ackjob \
 *                [--host 127.0.0.1] [--queues 1] [--queue-prefix queue-] [--body 100] \
 *                [--replicate N] [--async] [--retry 60] [--timeout-ms 5000] [--seconds S] \
 *                [--idle-timeout 30]
 *   resp_loadgen --serve PORT   (trivial fake Disque node, for measuring resp_loadgen itself)
 *
 * Nodes: --port may be given several times and takes a comma list (--ports is the same option).
 * --host may be given once (used for every port) or once per port. Connection c goes to node
 * c % nodes (round-robin) and uses queue "<prefix><c % queues>".
 *
 * Workloads (commands are sent as RESP multibulk):
 *   addjob                op = ADDJOB q body timeout-ms [REPLICATE n] RETRY s [ASYNC] -> +D-...
 *   getjob-ackjob         op = GETJOB NOHANG COUNT 1 FROM q -> [[queue, id, body]], then
 *                         ACKJOB id -> :1. A null array (*-1) means the queue on that node is
 *                         empty: the connection stops issuing ops (like loadgen's TIMED_OUT).
 *   addjob-getjob-ackjob  op = ADDJOB + GETJOB (pipelined together), then ACKJOB once the job
 *                         arrives. Here an empty GETJOB reply is an error.
 *
 * Every connection first sends PING (blocking) and expects +PONG.
 * --ops is the total over all connections (0 = unlimited, needs --seconds). --seconds stops
 * issuing new ops after S seconds; in-flight ops are then drained.
 *
 * Latency of an op = time from sending its first command to receiving its final reply.
 * Output: one JSON line on stdout, e.g.
 *   {"ops":..,"seconds":..,"ops_per_s":..,"p50_us":..,"p99_us":..,"errors":..,...}
 * Error replies (-...) and unexpected replies count as errors; the first few are printed on
 * stderr.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

struct endpoint {
    const char *host;
    int port;
    uint64_t ops;
    int conns;
};

#define LOADGEN_NAME "resp_loadgen"
/* Each connection's node, and its ADDJOB and GETJOB, prebuilt for its queue. */
#define LOADGEN_CONN_EXTRA          \
    struct endpoint *ep;            \
    const char *add_cmd, *get_cmd;  \
    size_t add_len, get_len;
#define LOADGEN_OP_DONE_EXTRA(c) ((c)->ep->ops++)
#include "loadgen_common.h"

enum workload { W_ADD = FIRST_ONLY, W_GA = SECOND_ONLY, W_AGA = FIRST_AND_SECOND };
static const char *const workload_names[] = {"addjob", "getjob-ackjob", "addjob-getjob-ackjob"};

/* What a pending reply is expected to be. */
enum expect {
    E_ADD_FINAL = EXPECT_FIRST_LAST, /* addjob workload: +D-... completes the op */
    E_ADD = EXPECT_FIRST,            /* addjob-getjob-ackjob: +D-..., op continues */
    E_GET = EXPECT_SECOND,           /* [[q,id,body]] -> send ACKJOB; *-1 -> queue empty */
    E_ACK,                           /* :1 completes the op */
};

/* ---- options (the common ones are in loadgen_common.h) ---- */
#define MAX_EPS 64
static const char *opt_hosts[MAX_EPS];
static int opt_nhosts;
static int opt_ports[MAX_EPS];
static int opt_nports;
static int opt_queues = 1;
static const char *opt_prefix = "queue-";
static int opt_replicate = 0; /* 0 = do not send REPLICATE (server default) */
static int opt_async = 0;
static int opt_retry = 60;
static int opt_timeout_ms = 5000;

/* ---- global state ---- */
static struct endpoint eps[MAX_EPS];
static int n_eps;
static uint64_t g_empty, g_ack_zero;


/* Append one RESP bulk string: $<len>\r\n<s>\r\n */
static void append_bulk(struct buf *b, const char *s, size_t n) {
    char hdr[32];
    size_t h = 0;
    hdr[h++] = '$';
    h += fmt_u64(hdr + h, n);
    hdr[h++] = '\r';
    hdr[h++] = '\n';
    buf_reserve(b, h + n + 2);
    memcpy(b->data + b->end, hdr, h);
    memcpy(b->data + b->end + h, s, n);
    memcpy(b->data + b->end + h + n, "\r\n", 2);
    b->end += h + n + 2;
}

static void append_array_hdr(struct buf *b, char type, int64_t n) {
    char hdr[32];
    int h = snprintf(hdr, sizeof(hdr), "%c%lld\r\n", type, (long long)n);
    buf_append(b, hdr, (size_t)h);
}

/* Append a command as a RESP multibulk; args are NUL-terminated strings. */
static void append_cmd(struct buf *b, int argc, const char **argv) {
    append_array_hdr(b, '*', argc);
    for (int i = 0; i < argc; i++) append_bulk(b, argv[i], strlen(argv[i]));
}

/* ---- RESP2 reply parser ---- */
#define RESP_MAX_DEPTH 32
#define RESP_MAX_LEAVES 12
#define RESP_MAX_LINE 65536

struct rleaf {
    char type; /* + - : $ * (a '*' leaf is a null or empty array); '$' with len -1 is null */
    int depth;
    const char *s;
    int64_t len; /* string length; integer value for ':'; -1 for null */
};

struct reply {
    char type;   /* type of the top-level value */
    int64_t n;   /* top level: integer value, bulk length or array count (-1 = null) */
    const char *s; /* top level: status/error line or bulk body */
    int nleaves; /* non-array values (and null/empty arrays), in order, up to RESP_MAX_LEAVES */
    struct rleaf leaves[RESP_MAX_LEAVES];
};

/* Parse a signed decimal number in [s, e); -1 if malformed. */
static int parse_i64(const char *s, const char *e, int64_t *out) {
    int neg = 0;
    if (s < e && *s == '-') neg = 1, s++;
    if (s >= e) return -1;
    int64_t v = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9') return -1;
        v = v * 10 + (*s - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

/*
 * Parse one complete RESP2 value (any nesting) at p. Returns the number of bytes it takes, 0 if
 * the buffer does not hold all of it yet (*need then tells how many bytes in total are known to
 * be needed, or 0), -1 if the data is not valid RESP.
 */
static ssize_t resp_parse(const char *p, const char *end, struct reply *r, size_t *need) {
    int64_t remaining[RESP_MAX_DEPTH];
    int d = 0, first = 1;
    const char *s = p;
    r->nleaves = 0;
    *need = 0;
    for (;;) {
        if (s >= end) return 0;
        char t = *s;
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        if (!nl) return (end - s) > RESP_MAX_LINE ? -1 : 0;
        if (nl == s || nl[-1] != '\r') return -1;
        const char *ls = s + 1, *le = nl - 1; /* line without type byte and CRLF */
        const char *next = nl + 1;
        int64_t n = 0;
        const char *str = ls;
        int complete = 1;
        switch (t) {
        case '+':
        case '-':
            n = le - ls;
            break;
        case ':':
            if (parse_i64(ls, le, &n) < 0) return -1;
            break;
        case '$':
            if (parse_i64(ls, le, &n) < 0 || n < -1) return -1;
            if (n >= 0) {
                if ((uint64_t)(end - next) < (uint64_t)n + 2) {
                    *need = (size_t)(next - p) + (size_t)n + 2;
                    return 0;
                }
                str = next;
                if (next[n] != '\r' || next[n + 1] != '\n') return -1;
                next += n + 2;
            } else {
                str = NULL;
            }
            break;
        case '*':
            if (parse_i64(ls, le, &n) < 0 || n < -1) return -1;
            if (n > 0) {
                if (d >= RESP_MAX_DEPTH) return -1;
                remaining[d++] = n;
                complete = 0;
            }
            str = NULL;
            break;
        default:
            return -1;
        }
        if (first) {
            r->type = t;
            r->n = n;
            r->s = str;
            first = 0;
        }
        if (complete && r->nleaves < RESP_MAX_LEAVES) {
            struct rleaf *lf = &r->leaves[r->nleaves++];
            lf->type = t;
            lf->depth = d;
            lf->s = str;
            lf->len = n;
        }
        s = next;
        while (complete) {
            if (d == 0) return s - p;
            if (--remaining[d - 1] > 0) break;
            d--; /* that array is complete: it counts as one value of its parent */
        }
    }
}

/* ---- error reporting ---- */
/* Errors counted by kind: the first word of an error reply (NOREPL, ERR, ...), or a word of ours. */
#define MAX_KINDS 16
static struct {
    char name[32];
    uint64_t n;
} g_kinds[MAX_KINDS];
static int g_nkinds;

static void count_kind(const char *name, size_t len) {
    if (len > 31) len = 31;
    for (int i = 0; i < g_nkinds; i++)
        if (strlen(g_kinds[i].name) == len && memcmp(g_kinds[i].name, name, len) == 0) {
            g_kinds[i].n++;
            return;
        }
    int i = g_nkinds < MAX_KINDS ? g_nkinds++ : MAX_KINDS - 1; /* the last slot overflows */
    if (i == MAX_KINDS - 1 && g_kinds[i].n) {
        memcpy(g_kinds[i].name, "other", 6);
    } else {
        memcpy(g_kinds[i].name, name, len);
        g_kinds[i].name[len] = 0;
    }
    g_kinds[i].n++;
}

static void report_error(struct conn *c, const char *what, const char *line, size_t len) {
    g_errors++;
    if (g_errors <= 10) {
        if (len > 160) len = 160;
        fprintf(stderr, "resp_loadgen: conn %d (port %d): %s: '%.*s'\n", c->idx, c->ep->port, what,
                (int)len, line ? line : "");
    } else if (g_errors == 11) {
        fprintf(stderr, "resp_loadgen: further errors suppressed\n");
    }
}

/* Describe a reply for an error message. */
static void report_reply(struct conn *c, const char *what, const struct reply *r) {
    char tmp[200];
    if (r->type == '-') {
        size_t w = 0;
        while (w < (size_t)r->n && r->s[w] != ' ') w++;
        count_kind(r->s, w);
    } else if (r->type == '*' && r->n <= 0) {
        count_kind("empty", 5);
    } else {
        count_kind("unexpected", 10);
    }
    if (r->type == '+' || r->type == '-') {
        report_error(c, what, r->s - 1, (size_t)r->n + 1);
        return;
    }
    int n;
    if (r->type == '$' && r->n >= 0)
        n = snprintf(tmp, sizeof(tmp), "$%lld %.*s", (long long)r->n, (int)(r->n > 80 ? 80 : r->n), r->s);
    else
        n = snprintf(tmp, sizeof(tmp), "%c%lld", r->type, (long long)r->n);
    report_error(c, what, tmp, (size_t)n);
}

/* ---- op issuing: an ADDJOB first, a GETJOB second ---- */
static void append_first(struct conn *c) {
    buf_append(&c->out, c->add_cmd, c->add_len);
}

static void append_second(struct conn *c) {
    buf_append(&c->out, c->get_cmd, c->get_len);
}

static void report_conn_error(struct conn *c, const char *why) {
    count_kind("connection", 10);
    report_error(c, why, strerror(errno), strlen(strerror(errno)));
}

static inline int is_job_id_status(const struct reply *r) {
    return r->type == '+' && r->n >= 2 && r->s[0] == 'D' && r->s[1] == '-';
}

/*
 * Parse as many complete replies as are buffered. Returns 0 normally, -1 if the connection is
 * out of sync and must be dropped.
 */
static int parse_replies(struct conn *c, uint64_t t) {
    struct buf *b = &c->in;
    struct reply r;
    while (b->start < b->end) {
        const char *p = b->data + b->start;
        size_t need = 0;
        ssize_t used = resp_parse(p, b->data + b->end, &r, &need);
        if (used < 0) {
            size_t avail = b->end - b->start;
            report_error(c, "malformed reply", p, avail < 80 ? avail : 80);
            return -1;
        }
        if (used == 0) {
            if (need > b->end - b->start) buf_reserve(b, need - (b->end - b->start));
            break;
        }
        if (c->qlen == 0) {
            report_reply(c, "reply with nothing pending", &r);
            b->start += (size_t)used;
            continue;
        }
        struct pending pp = q_pop(c);
        switch (pp.type) {
        case E_ADD_FINAL:
            if (is_job_id_status(&r)) op_done(c, pp.t0, t, 1);
            else { report_reply(c, "ADDJOB failed", &r); op_done(c, pp.t0, t, 0); }
            break;
        case E_ADD:
            if (!is_job_id_status(&r)) {
                report_reply(c, "ADDJOB failed", &r);
                /* mark the paired GETJOB so the op is not counted as a success */
                if (c->qlen > 0) c->q[c->qhead].failed = 1;
            }
            break;
        case E_GET:
            if (r.type == '*' && r.n > 0) {
                /* [[queue, id, body, ...]]: the id is the second leaf */
                if (r.nleaves < 2 || r.leaves[1].type != '$' || r.leaves[1].len <= 0 ||
                    r.leaves[1].depth != 2) {
                    report_reply(c, "unexpected GETJOB reply shape", &r);
                    op_done(c, pp.t0, t, 0);
                    break;
                }
                if (r.n > 1) report_reply(c, "GETJOB COUNT 1 returned more than one job", &r);
                const struct rleaf *id = &r.leaves[1];
                struct buf *o = &c->out;
                static const char ack_hdr[] = "*2\r\n$6\r\nACKJOB\r\n";
                buf_append(o, ack_hdr, sizeof(ack_hdr) - 1);
                append_bulk(o, id->s, (size_t)id->len);
                q_push(c, E_ACK, pp.t0, pp.failed);
            } else if (r.type == '*') { /* *-1 (or *0): queue empty on this node */
                g_empty++;
                if (opt_workload == W_GA) c->stopped = 1;
                else report_reply(c, "GETJOB found no job", &r);
                op_done(c, pp.t0, t, 0);
            } else {
                report_reply(c, "GETJOB failed", &r);
                op_done(c, pp.t0, t, 0);
            }
            break;
        case E_ACK:
            if (r.type == ':' && r.n == 1) {
                op_done(c, pp.t0, t, !pp.failed);
            } else {
                if (r.type == ':' && r.n == 0) g_ack_zero++;
                report_reply(c, "ACKJOB failed", &r);
                op_done(c, pp.t0, t, 0);
            }
            break;
        }
        b->start += (size_t)used;
    }
    if (b->start == b->end) b->start = b->end = 0;
    return 0;
}

/* ---- blocking setup ---- */
static int connect_to(const struct endpoint *ep) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", ep->port);
    int gai = getaddrinfo(ep->host, portstr, &hints, &ai);
    if (gai != 0) die("getaddrinfo %s: %s", ep->host, gai_strerror(gai));
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0) die("socket: %s", strerror(errno));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
        die("connect %s:%d: %s", ep->host, ep->port, strerror(errno));
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* PING the node and wait for +PONG. */
static void setup_conn(struct conn *c) {
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    write_all(c->fd, ping, sizeof(ping) - 1);
    char line[512];
    size_t n = 0;
    while (n + 1 < sizeof(line)) {
        ssize_t r = read(c->fd, line + n, sizeof(line) - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die("conn %d (port %d): setup: connection closed", c->idx, c->ep->port);
        n += (size_t)r;
        if (memchr(line, '\n', n)) break;
    }
    line[n] = 0;
    if (strncmp(line, "+PONG\r\n", 7) != 0 || n != 7)
        die("conn %d (port %d): setup: expected +PONG, got '%.*s'", c->idx, c->ep->port,
            (int)strcspn(line, "\r\n"), line);
}

/* ---- --serve: the fake server's Disque node (loadgen_common.h's fake_serve) ---- */

static int leaf_is(const struct rleaf *lf, const char *s) {
    size_t n = strlen(s);
    return lf->type == '$' && lf->len == (int64_t)n && strncasecmp(lf->s, s, n) == 0;
}

static void fake_process(struct fconn *f) {
    static uint64_t next_id = 1, jobs = 0;
    struct buf *b = &f->in;
    struct reply r;
    char tmp[256];
    while (b->start < b->end) {
        size_t need;
        ssize_t used = resp_parse(b->data + b->start, b->data + b->end, &r, &need);
        if (used < 0) {
            buf_append(&f->out, "-ERR Protocol error\r\n", 21);
            b->start = b->end;
            break;
        }
        if (used == 0) break;
        b->start += (size_t)used;
        if (r.type != '*' || r.nleaves < 1 || r.leaves[0].type != '$') {
            buf_append(&f->out, "-ERR expected a multibulk command\r\n", 35);
            continue;
        }
        const struct rleaf *a = r.leaves;
        int argc = r.nleaves;
        if (leaf_is(&a[0], "PING")) {
            buf_append(&f->out, "+PONG\r\n", 7);
        } else if (leaf_is(&a[0], "ADDJOB") && argc >= 4) {
            int repl = 1;
            for (int i = 4; i + 1 < argc; i++)
                if (leaf_is(&a[i], "REPLICATE")) repl = atoi(a[i + 1].s);
            if (repl > 3) {
                static const char e[] = "-NOREPL Not enough reachable nodes for the requested replication level\r\n";
                buf_append(&f->out, e, sizeof(e) - 1);
                continue;
            }
            jobs++;
            int n = snprintf(tmp, sizeof(tmp), "+D-fa4e0001-%024llu-0e11\r\n", (unsigned long long)next_id++);
            buf_append(&f->out, tmp, (size_t)n);
        } else if (leaf_is(&a[0], "GETJOB") && argc >= 3) {
            const struct rleaf *qn = &a[argc - 1];
            if (jobs == 0) {
                buf_append(&f->out, "*-1\r\n", 5);
                continue;
            }
            jobs--;
            buf_append(&f->out, "*1\r\n*3\r\n", 8);
            append_bulk(&f->out, qn->s, (size_t)qn->len);
            int n = snprintf(tmp, sizeof(tmp), "D-fa4e0001-%024llu-0e11", (unsigned long long)next_id++);
            append_bulk(&f->out, tmp, (size_t)n);
            append_array_hdr(&f->out, '$', opt_body);
            buf_reserve(&f->out, (size_t)opt_body + 2);
            memset(f->out.data + f->out.end, 'x', (size_t)opt_body);
            f->out.end += (size_t)opt_body;
            buf_append(&f->out, "\r\n", 2);
        } else if (leaf_is(&a[0], "ACKJOB") && argc >= 2) {
            int n = snprintf(tmp, sizeof(tmp), ":%d\r\n", argc - 1);
            buf_append(&f->out, tmp, (size_t)n);
        } else if (leaf_is(&a[0], "QLEN")) {
            int n = snprintf(tmp, sizeof(tmp), ":%llu\r\n", (unsigned long long)jobs);
            buf_append(&f->out, tmp, (size_t)n);
        } else {
            int n = snprintf(tmp, sizeof(tmp), "-ERR unknown command '%.*s'\r\n",
                             (int)(a[0].len > 64 ? 64 : a[0].len), a[0].s);
            buf_append(&f->out, tmp, (size_t)n);
        }
    }
    if (b->start == b->end) b->start = b->end = 0;
}

/* ---- setup of commands and nodes ---- */
static void build_queue_cmds(int qi, char **add, size_t *add_len, char **get, size_t *get_len) {
    char queue[256], tmo[24], repl[24], retry[24];
    snprintf(queue, sizeof(queue), "%s%d", opt_prefix, qi);
    snprintf(tmo, sizeof(tmo), "%d", opt_timeout_ms);
    snprintf(repl, sizeof(repl), "%d", opt_replicate);
    snprintf(retry, sizeof(retry), "%d", opt_retry);
    char *body = malloc((size_t)opt_body + 1);
    if (!body) die("out of memory");
    for (int i = 0; i < opt_body; i++) body[i] = (char)('a' + i % 26);
    body[opt_body] = 0;

    const char *argv[10];
    int argc = 0;
    argv[argc++] = "ADDJOB";
    argv[argc++] = queue;
    argv[argc++] = body;
    argv[argc++] = tmo;
    if (opt_replicate > 0) {
        argv[argc++] = "REPLICATE";
        argv[argc++] = repl;
    }
    argv[argc++] = "RETRY";
    argv[argc++] = retry;
    if (opt_async) argv[argc++] = "ASYNC";
    struct buf b = {0};
    append_cmd(&b, argc, argv);
    *add = b.data;
    *add_len = b.end;

    const char *gargv[] = {"GETJOB", "NOHANG", "COUNT", "1", "FROM", queue};
    struct buf g = {0};
    append_cmd(&g, 6, gargv);
    *get = g.data;
    *get_len = g.end;
    free(body);
}

static void add_ports(const char *v) {
    char *copy = strdup(v), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (opt_nports >= MAX_EPS) die("too many ports (max %d)", MAX_EPS);
        char *endp;
        long p = strtol(tok, &endp, 10);
        if (*endp || p <= 0 || p > 65535) die("bad port '%s'", tok);
        opt_ports[opt_nports++] = (int)p;
    }
    free(copy);
}

static void add_hosts(const char *v) {
    char *copy = strdup(v), *save = NULL; /* kept: opt_hosts point into it */
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (opt_nhosts >= MAX_EPS) die("too many hosts (max %d)", MAX_EPS);
        opt_hosts[opt_nhosts++] = tok;
    }
}

static void build_endpoints(void) {
    if (opt_nports == 0) opt_ports[opt_nports++] = 7711;
    if (opt_nhosts == 0) opt_hosts[opt_nhosts++] = "127.0.0.1";
    if (opt_nhosts == 1 || opt_nhosts == opt_nports) {
        n_eps = opt_nports;
        for (int i = 0; i < n_eps; i++) {
            eps[i].host = opt_hosts[opt_nhosts == 1 ? 0 : i];
            eps[i].port = opt_ports[i];
        }
    } else if (opt_nports == 1) {
        n_eps = opt_nhosts;
        for (int i = 0; i < n_eps; i++) {
            eps[i].host = opt_hosts[i];
            eps[i].port = opt_ports[0];
        }
    } else {
        die("give one host, one port, or as many hosts as ports (%d hosts, %d ports)", opt_nhosts,
            opt_nports);
    }
}

static void usage(void) {
    fprintf(stderr,
            "usage: resp_loadgen [--host H[,H..]] [--port P[,P..]]... [--conns N] [--pipeline K]\n"
            "                    [--ops TOTAL] [--seconds S]\n"
            "                    [--workload addjob|getjob-ackjob|addjob-getjob-ackjob]\n"
            "                    [--queues K] [--queue-prefix P] [--body BYTES] [--replicate N]\n"
            "                    [--async] [--retry S] [--timeout-ms MS] [--idle-timeout S]\n"
            "       resp_loadgen --serve PORT [--host ADDR] [--body BYTES]   (fake node, for self-tests)\n");
    exit(2);
}

static int own_flag(const char *a) {
    if (strcmp(a, "--async")) return 0;
    opt_async = 1;
    return 1;
}

static int own_option(const char *a, const char *v) {
    static const struct int_option ints[] = {{"--queues", &opt_queues},
        {"--replicate", &opt_replicate}, {"--retry", &opt_retry},
        {"--timeout-ms", &opt_timeout_ms}, {NULL, NULL}};
    if (!strcmp(a, "--host") || !strcmp(a, "--hosts")) add_hosts(v);
    else if (!strcmp(a, "--port") || !strcmp(a, "--ports")) add_ports(v);
    else if (!strcmp(a, "--queue-prefix")) opt_prefix = v;
    else return int_option(ints, a, v);
    return 1;
}

int main(int argc, char **argv) {
    parse_options(argc, argv);
    if (opt_queues < 1 || opt_replicate < 0 || opt_retry < 0 || opt_timeout_ms < 0) die("bad arguments");
    if (opt_serve_port > 0) return fake_serve(opt_nhosts ? opt_hosts[0] : "127.0.0.1", opt_serve_port);
    if (opt_ops == 0 && opt_seconds <= 0) die("--ops 0 needs --seconds");
    build_endpoints();

    /* one ADDJOB / GETJOB command per queue, built once */
    char **add_cmds = calloc((size_t)opt_queues, sizeof(char *));
    char **get_cmds = calloc((size_t)opt_queues, sizeof(char *));
    size_t *add_lens = calloc((size_t)opt_queues, sizeof(size_t));
    size_t *get_lens = calloc((size_t)opt_queues, sizeof(size_t));
    if (!add_cmds || !get_cmds || !add_lens || !get_lens) die("out of memory");
    for (int qi = 0; qi < opt_queues && qi < opt_conns; qi++)
        build_queue_cmds(qi, &add_cmds[qi], &add_lens[qi], &get_cmds[qi], &get_lens[qi]);

    struct conn *conns = new_conns();
    for (int i = 0; i < opt_conns; i++) {
        struct conn *c = &conns[i];
        c->ep = &eps[i % n_eps];
        c->ep->conns++;
        c->fd = connect_to(c->ep);
        int qi = i % opt_queues;
        c->add_cmd = add_cmds[qi];
        c->add_len = add_lens[qi];
        c->get_cmd = get_cmds[qi];
        c->get_len = get_lens[qi];
        setup_conn(c);
    }

    uint64_t t_start, t_end;
    int gave_up = run_loop(conns, &t_start, &t_end);
    print_common_fields(t_start, t_end);
    printf("\"empty\":%llu,\"ack_zero\":%llu,\"gave_up\":%s,\"conns\":%d,\"pipeline\":%d,"
           "\"workload\":\"%s\",\"replicate\":%d,\"async\":%s,\"queues\":%d,\"body\":%d,"
           "\"nodes\":[",
           (unsigned long long)g_empty, (unsigned long long)g_ack_zero, gave_up ? "true" : "false",
           opt_conns, opt_pipeline, workload_names[opt_workload], opt_replicate,
           opt_async ? "true" : "false", opt_queues, opt_body);
    for (int i = 0; i < n_eps; i++)
        printf("%s{\"host\":\"%s\",\"port\":%d,\"conns\":%d,\"ops\":%llu}", i ? "," : "",
               eps[i].host, eps[i].port, eps[i].conns, (unsigned long long)eps[i].ops);
    printf("],\"error_kinds\":{");
    for (int i = 0; i < g_nkinds; i++) {
        printf("%s\"", i ? "," : "");
        for (const char *k = g_kinds[i].name; *k; k++) /* keep the JSON valid */
            putchar(*k == '"' || *k == '\\' || (unsigned char)*k < 0x20 ? '?' : *k);
        printf("\":%llu", (unsigned long long)g_kinds[i].n);
    }
    printf("}}\n");
    fflush(stdout);
    return 0;
}

/*
 * loadgen: a small epoll-based beanstalk-protocol load generator.
 *
 * Build:  gcc -O2 -o scripts/loadgen scripts/loadgen.c
 *
 * Usage:
 *   loadgen --host 127.0.0.1 --port 11300 --conns 50 --pipeline 16 \
 *           --ops 1000000 --workload put|reserve-delete|put-reserve-delete \
 *           [--tubes 1] [--body 100] [--seconds S] [--tube-prefix tube-] \
 *           [--idle-timeout 30]
 *   loadgen --serve PORT   (trivial fake beanstalkd for measuring loadgen itself)
 *
 * Workloads (connection c uses tube "<prefix><c % tubes>"):
 *   put                 `use` the tube, keep K puts in flight; op = put -> INSERTED.
 *   reserve-delete      `watch` the tube + `ignore default`; keep K ops in flight where an op
 *                       is `reserve-with-timeout 0` -> RESERVED, then `delete <id>` -> DELETED.
 *                       A TIMED_OUT reply means the tube is empty: the connection stops.
 *   put-reserve-delete  use + watch the tube; op = put + reserve-with-timeout 0 (pipelined
 *                       together) then `delete <id>` once RESERVED arrives.
 *
 * --ops is the total over all connections (0 = unlimited, needs --seconds). --seconds stops
 * issuing new ops after S seconds; in-flight ops are then drained.
 *
 * Latency of an op = time from sending its first command to receiving its final reply.
 * Output: one JSON line on stdout, e.g.
 *   {"ops":..,"seconds":..,"ops_per_s":..,"p50_us":..,"p99_us":..,"errors":..,...}
 * Unexpected replies count as errors; the first few are printed on stderr.
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

#define LOADGEN_NAME "loadgen"
#include "loadgen_common.h"

enum workload { W_PUT, W_RD, W_PRD };

/* What a pending reply is expected to be. */
enum expect {
    E_INSERTED_FINAL, /* put workload: INSERTED completes the op */
    E_INSERTED,       /* put-reserve-delete: INSERTED, op continues */
    E_RESERVED,       /* RESERVED -> send delete; TIMED_OUT -> tube empty */
    E_DELETED,        /* DELETED completes the op */
};

struct pending {
    uint8_t type;
    uint8_t failed; /* the op already had an error (put failed in put-reserve-delete) */
    uint64_t t0;    /* ns, time the op's first command was sent */
};

struct conn {
    int fd;
    int idx;
    int dead;
    int stopped; /* no more ops are issued (tube empty, quota or deadline) */
    int want_out; /* EPOLLOUT registered */
    uint64_t quota, issued, inflight;
    struct buf in, out;
    struct pending *q; /* ring */
    size_t qhead, qlen, qcap;
};

/* ---- options ---- */
static const char *opt_host = "127.0.0.1";
static int opt_port = 11300;
static int opt_conns = 1;
static int opt_pipeline = 1;
static uint64_t opt_ops = 100000;
static enum workload opt_workload = W_PUT;
static int opt_tubes = 1;
static int opt_body = 100;
static double opt_seconds = 0;
static double opt_idle_timeout = 30;
static const char *opt_prefix = "tube-";
static int opt_pri = 0, opt_delay = 0, opt_ttr = 120;

/* ---- global state ---- */
static char *put_cmd;
static size_t put_cmd_len;
static const char reserve_cmd[] = "reserve-with-timeout 0\r\n";
static uint64_t g_ops, g_errors, g_timed_out;
static uint64_t g_deadline_ns; /* 0 = none */
static int g_deadline_hit;
static int g_conns_active;


/* ---- error reporting ---- */
static void report_error(struct conn *c, const char *what, const char *line, size_t len) {
    g_errors++;
    if (g_errors <= 10) {
        if (len > 120) len = 120;
        fprintf(stderr, "loadgen: conn %d: %s: '%.*s'\n", c->idx, what, (int)len, line ? line : "");
    } else if (g_errors == 11) {
        fprintf(stderr, "loadgen: further errors suppressed\n");
    }
}

/* ---- pending queue ---- */
static inline void q_push(struct conn *c, uint8_t type, uint64_t t0, uint8_t failed) {
    if (c->qlen == c->qcap) {
        size_t nc = c->qcap * 2;
        struct pending *nq = malloc(nc * sizeof(*nq));
        if (!nq) die("out of memory");
        for (size_t i = 0; i < c->qlen; i++) nq[i] = c->q[(c->qhead + i) % c->qcap];
        free(c->q);
        c->q = nq;
        c->qhead = 0;
        c->qcap = nc;
    }
    struct pending *p = &c->q[(c->qhead + c->qlen) % c->qcap];
    p->type = type;
    p->t0 = t0;
    p->failed = failed;
    c->qlen++;
}

static inline struct pending q_pop(struct conn *c) {
    struct pending p = c->q[c->qhead];
    c->qhead = (c->qhead + 1) % c->qcap;
    c->qlen--;
    return p;
}

/* ---- op issuing ---- */
static void issue_ops(struct conn *c, uint64_t t) {
    if (c->dead) return;
    if (g_deadline_hit) c->stopped = 1;
    while (!c->stopped && c->inflight < (uint64_t)opt_pipeline && c->issued < c->quota) {
        switch (opt_workload) {
        case W_PUT:
            buf_append(&c->out, put_cmd, put_cmd_len);
            q_push(c, E_INSERTED_FINAL, t, 0);
            break;
        case W_RD:
            buf_append(&c->out, reserve_cmd, sizeof(reserve_cmd) - 1);
            q_push(c, E_RESERVED, t, 0);
            break;
        case W_PRD:
            buf_append(&c->out, put_cmd, put_cmd_len);
            buf_append(&c->out, reserve_cmd, sizeof(reserve_cmd) - 1);
            q_push(c, E_INSERTED, t, 0);
            q_push(c, E_RESERVED, t, 0);
            break;
        }
        c->issued++;
        c->inflight++;
    }
    if (c->issued >= c->quota) c->stopped = 1;
}

static void op_done(struct conn *c, uint64_t t0, uint64_t t, int ok) {
    c->inflight--;
    if (ok) {
        g_ops++;
        hist_add((t - t0) / 1000);
    }
}

static void conn_kill(struct conn *c, int epfd, const char *why) {
    if (c->dead) return;
    if (why) report_error(c, why, strerror(errno), strlen(strerror(errno)));
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->dead = 1;
    c->stopped = 1;
    g_errors += c->inflight; /* ops that will never complete */
    c->inflight = 0;
    c->qlen = 0;
    g_conns_active--;
}

static inline int starts(const char *line, size_t len, const char *pfx) {
    size_t n = strlen(pfx);
    return len >= n && memcmp(line, pfx, n) == 0;
}

/* Parse a decimal number at *p (< end); advances *p. Returns -1 if there are no digits. */
static inline int parse_u64(const char **p, const char *end, uint64_t *out) {
    const char *s = *p;
    uint64_t v = 0;
    while (s < end && *s >= '0' && *s <= '9') v = v * 10 + (uint64_t)(*s++ - '0');
    if (s == *p) return -1;
    *p = s;
    *out = v;
    return 0;
}

/*
 * Parse as many complete replies as are buffered. Returns 0 normally, -1 if the connection is
 * out of sync and must be dropped.
 */
static int parse_replies(struct conn *c, uint64_t t) {
    struct buf *b = &c->in;
    while (b->start < b->end) {
        char *line = b->data + b->start;
        size_t avail = b->end - b->start;
        char *nl = memchr(line, '\n', avail);
        if (!nl) {
            if (avail > 4096) {
                report_error(c, "overlong reply line", line, 80);
                return -1;
            }
            return 0;
        }
        size_t linelen = (size_t)(nl - line) + 1; /* including \n */
        size_t len = linelen;                     /* without \r\n */
        if (len >= 2 && line[len - 2] == '\r') len -= 2; else len -= 1;
        size_t consumed = linelen;

        if (c->qlen == 0) {
            report_error(c, "reply with nothing pending", line, len);
            b->start += consumed;
            continue;
        }
        struct pending *p = &c->q[c->qhead];

        if (starts(line, len, "RESERVED ")) {
            /* RESERVED <id> <bytes>\r\n<data>\r\n */
            const char *pos = line + 9, *lend = line + len;
            uint64_t id, nbytes;
            if (parse_u64(&pos, lend, &id) < 0 || pos >= lend || *pos++ != ' ' ||
                parse_u64(&pos, lend, &nbytes) < 0 || pos != lend) {
                report_error(c, "malformed RESERVED", line, len);
                return -1;
            }
            if (avail < linelen + nbytes + 2) {
                buf_reserve(b, linelen + nbytes + 2 - avail);
                return 0; /* body not complete yet */
            }
            if (line[linelen + nbytes] != '\r' || line[linelen + nbytes + 1] != '\n') {
                report_error(c, "RESERVED body not terminated by CRLF", line, len);
                return -1;
            }
            consumed = linelen + nbytes + 2;
            if (p->type != E_RESERVED) {
                report_error(c, "unexpected RESERVED", line, len);
                return -1; /* out of sync */
            }
            struct pending pp = q_pop(c);
            char cmd[48] = "delete ";
            size_t n = 7 + fmt_u64(cmd + 7, id);
            cmd[n++] = '\r';
            cmd[n++] = '\n';
            buf_append(&c->out, cmd, n);
            q_push(c, E_DELETED, pp.t0, pp.failed);
            b->start += consumed;
            continue;
        }

        struct pending pp = q_pop(c);
        switch (pp.type) {
        case E_INSERTED_FINAL:
            if (starts(line, len, "INSERTED ")) op_done(c, pp.t0, t, 1);
            else { report_error(c, "put failed", line, len); op_done(c, pp.t0, t, 0); }
            break;
        case E_INSERTED:
            if (!starts(line, len, "INSERTED ")) {
                report_error(c, "put failed", line, len);
                /* mark the paired reserve so the op is not counted as a success */
                if (c->qlen > 0) c->q[c->qhead].failed = 1;
            }
            break;
        case E_RESERVED:
            if (len == 9 && memcmp(line, "TIMED_OUT", 9) == 0) {
                g_timed_out++;
                if (opt_workload == W_RD) {
                    c->stopped = 1; /* tube empty */
                } else {
                    report_error(c, "reserve timed out", line, len);
                }
                op_done(c, pp.t0, t, 0);
            } else {
                report_error(c, "reserve failed", line, len);
                op_done(c, pp.t0, t, 0);
            }
            break;
        case E_DELETED:
            if (len == 7 && memcmp(line, "DELETED", 7) == 0) {
                op_done(c, pp.t0, t, !pp.failed);
            } else {
                report_error(c, "delete failed", line, len);
                op_done(c, pp.t0, t, 0);
            }
            break;
        }
        b->start += consumed;
    }
    if (b->start == b->end) b->start = b->end = 0;
    return 0;
}

/* Try to write the output buffer; arm/disarm EPOLLOUT as needed. */
static void flush_out(struct conn *c, int epfd) {
    struct buf *o = &c->out;
    while (o->start < o->end) {
        ssize_t n = write(c->fd, o->data + o->start, o->end - o->start);
        if (n > 0) {
            o->start += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            conn_kill(c, epfd, "write");
            return;
        }
    }
    if (o->start == o->end) o->start = o->end = 0;
    int need = o->start < o->end;
    if (need != c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN | (need ? EPOLLOUT : 0), .data.ptr = c};
        epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = need;
    }
}

static void check_done(struct conn *c, int epfd) {
    if (!c->dead && c->stopped && c->inflight == 0 && c->qlen == 0 && c->out.start == c->out.end) {
        /* finished: stop polling it; the socket stays open until exit */
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        c->dead = 2;
        g_conns_active--;
    }
}

/* ---- blocking setup ---- */
static int read_line_blocking(int fd, char *out, size_t cap) {
    size_t n = 0;
    while (n + 1 < cap) {
        char ch;
        ssize_t r = read(fd, &ch, 1);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return -1;
        }
        out[n++] = ch;
        if (ch == '\n') break;
    }
    out[n] = 0;
    return (int)n;
}

static void write_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("setup write: %s", strerror(errno));
        }
        s += w;
        n -= (size_t)w;
    }
}

static void expect_line(int fd, int idx, const char *pfx) {
    char line[512];
    if (read_line_blocking(fd, line, sizeof(line)) <= 0) die("conn %d: setup: connection closed", idx);
    if (strncmp(line, pfx, strlen(pfx)) != 0) die("conn %d: setup: expected %s, got '%s'", idx, pfx, line);
}

static int connect_to(struct addrinfo *ai) {
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0) die("socket: %s", strerror(errno));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) die("connect %s:%d: %s", opt_host, opt_port, strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void setup_conn(struct conn *c) {
    char tube[256], cmd[600];
    snprintf(tube, sizeof(tube), "%s%d", opt_prefix, c->idx % opt_tubes);
    if (opt_workload == W_PUT || opt_workload == W_PRD) {
        int n = snprintf(cmd, sizeof(cmd), "use %s\r\n", tube);
        write_all(c->fd, cmd, (size_t)n);
        expect_line(c->fd, c->idx, "USING ");
    }
    if (opt_workload == W_RD || opt_workload == W_PRD) {
        int n = snprintf(cmd, sizeof(cmd), "watch %s\r\nignore default\r\n", tube);
        write_all(c->fd, cmd, (size_t)n);
        expect_line(c->fd, c->idx, "WATCHING ");
        expect_line(c->fd, c->idx, "WATCHING ");
    }
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
}

/* ---- --serve: a trivial in-memory fake beanstalkd, used to measure loadgen's own ceiling ---- */
struct fconn {
    int fd;
    struct buf in, out;
};

static void fake_process(struct fconn *f) {
    static uint64_t next_id = 1;
    struct buf *b = &f->in;
    char tmp[128];
    while (b->start < b->end) {
        char *line = b->data + b->start;
        size_t avail = b->end - b->start;
        char *nl = memchr(line, '\n', avail);
        if (!nl) break;
        size_t linelen = (size_t)(nl - line) + 1;
        size_t len = linelen >= 2 && line[linelen - 2] == '\r' ? linelen - 2 : linelen - 1;
        size_t consumed = linelen;
        int n;
        if (starts(line, len, "put ")) {
            size_t tl = len < sizeof(tmp) - 1 ? len : sizeof(tmp) - 1;
            memcpy(tmp, line, tl);
            tmp[tl] = 0;
            unsigned long long a, d, r, nb;
            if (sscanf(tmp, "put %llu %llu %llu %llu", &a, &d, &r, &nb) != 4) {
                buf_append(&f->out, "BAD_FORMAT\r\n", 12);
            } else {
                if (avail < linelen + nb + 2) break; /* wait for the body */
                consumed += nb + 2;
                n = snprintf(tmp, sizeof(tmp), "INSERTED %llu\r\n", (unsigned long long)next_id++);
                buf_append(&f->out, tmp, (size_t)n);
            }
        } else if (starts(line, len, "reserve")) {
            n = snprintf(tmp, sizeof(tmp), "RESERVED %llu %d\r\n", (unsigned long long)next_id++,
                         opt_body);
            buf_append(&f->out, tmp, (size_t)n);
            buf_reserve(&f->out, (size_t)opt_body + 2);
            memset(f->out.data + f->out.end, 'x', (size_t)opt_body);
            f->out.end += (size_t)opt_body;
            buf_append(&f->out, "\r\n", 2);
        } else if (starts(line, len, "delete ")) {
            buf_append(&f->out, "DELETED\r\n", 9);
        } else if (starts(line, len, "use ")) {
            buf_append(&f->out, "USING ", 6);
            buf_append(&f->out, line + 4, len - 4);
            buf_append(&f->out, "\r\n", 2);
        } else if (starts(line, len, "watch ")) {
            buf_append(&f->out, "WATCHING 2\r\n", 12);
        } else if (starts(line, len, "ignore ")) {
            buf_append(&f->out, "WATCHING 1\r\n", 12);
        } else if (starts(line, len, "stats")) {
            buf_append(&f->out, "OK 5\r\n---\r\n\r\n", 13);
        } else {
            buf_append(&f->out, "UNKNOWN_COMMAND\r\n", 17);
        }
        b->start += consumed;
    }
    if (b->start == b->end) b->start = b->end = 0;
}

static int fake_serve(int port) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, opt_host, &sa.sin_addr);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0) die("bind: %s", strerror(errno));
    if (listen(lfd, 1024) < 0) die("listen: %s", strerror(errno));
    int epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev);
    fprintf(stderr, "loadgen: fake server listening on %s:%d\n", opt_host, port);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(epfd, evs, 256, -1);
        if (n < 0 && errno == EINTR) continue;
        for (int i = 0; i < n; i++) {
            struct fconn *f = evs[i].data.ptr;
            if (!f) {
                int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
                if (cfd < 0) continue;
                setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                f = calloc(1, sizeof(*f));
                f->fd = cfd;
                struct epoll_event cev = {.events = EPOLLIN, .data.ptr = f};
                epoll_ctl(epfd, EPOLL_CTL_ADD, cfd, &cev);
                continue;
            }
            buf_reserve(&f->in, 65536);
            ssize_t r = read(f->fd, f->in.data + f->in.end, f->in.cap - f->in.end);
            if (r <= 0) {
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                epoll_ctl(epfd, EPOLL_CTL_DEL, f->fd, NULL);
                close(f->fd);
                free(f->in.data);
                free(f->out.data);
                free(f);
                continue;
            }
            f->in.end += (size_t)r;
            fake_process(f);
            /* replies are small; a blocking-ish write loop is good enough for a test server */
            while (f->out.start < f->out.end) {
                ssize_t w = write(f->fd, f->out.data + f->out.start, f->out.end - f->out.start);
                if (w > 0) f->out.start += (size_t)w;
                else if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                else break;
            }
            f->out.start = f->out.end = 0;
        }
    }
    return 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: loadgen [--host H] [--port P] [--conns N] [--pipeline K] [--ops TOTAL]\n"
            "               [--workload put|reserve-delete|put-reserve-delete] [--tubes T]\n"
            "               [--body BYTES] [--seconds S] [--tube-prefix P] [--idle-timeout S]\n"
            "               [--pri N] [--delay N] [--ttr N]\n"
            "       loadgen --serve PORT [--host ADDR] [--body BYTES]   (fake server, for self-tests)\n");
    exit(2);
}

int main(int argc, char **argv) {
    int serve_port = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage();
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--host")) opt_host = v;
        else if (!strcmp(a, "--port")) opt_port = atoi(v);
        else if (!strcmp(a, "--conns")) opt_conns = atoi(v);
        else if (!strcmp(a, "--pipeline")) opt_pipeline = atoi(v);
        else if (!strcmp(a, "--ops")) opt_ops = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--tubes")) opt_tubes = atoi(v);
        else if (!strcmp(a, "--body")) opt_body = atoi(v);
        else if (!strcmp(a, "--seconds")) opt_seconds = atof(v);
        else if (!strcmp(a, "--idle-timeout")) opt_idle_timeout = atof(v);
        else if (!strcmp(a, "--tube-prefix")) opt_prefix = v;
        else if (!strcmp(a, "--pri")) opt_pri = atoi(v);
        else if (!strcmp(a, "--delay")) opt_delay = atoi(v);
        else if (!strcmp(a, "--ttr")) opt_ttr = atoi(v);
        else if (!strcmp(a, "--serve")) serve_port = atoi(v);
        else if (!strcmp(a, "--workload")) {
            if (!strcmp(v, "put")) opt_workload = W_PUT;
            else if (!strcmp(v, "reserve-delete")) opt_workload = W_RD;
            else if (!strcmp(v, "put-reserve-delete")) opt_workload = W_PRD;
            else die("unknown workload '%s'", v);
        } else {
            fprintf(stderr, "loadgen: unknown option %s\n", a);
            usage();
        }
    }
    if (opt_conns < 1 || opt_pipeline < 1 || opt_tubes < 1 || opt_body < 0) die("bad arguments");
    if (opt_ops == 0 && opt_seconds <= 0) die("--ops 0 needs --seconds");
    signal(SIGPIPE, SIG_IGN);
    if (serve_port > 0) return fake_serve(serve_port);

    /* build the put command once */
    char hdr[128];
    int hl = snprintf(hdr, sizeof(hdr), "put %d %d %d %d\r\n", opt_pri, opt_delay, opt_ttr, opt_body);
    put_cmd_len = (size_t)hl + (size_t)opt_body + 2;
    put_cmd = malloc(put_cmd_len);
    memcpy(put_cmd, hdr, (size_t)hl);
    for (int i = 0; i < opt_body; i++) put_cmd[hl + i] = (char)('a' + i % 26);
    memcpy(put_cmd + hl + opt_body, "\r\n", 2);

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", opt_port);
    int gai = getaddrinfo(opt_host, portstr, &hints, &ai);
    if (gai != 0) die("getaddrinfo %s: %s", opt_host, gai_strerror(gai));

    int epfd = epoll_create1(0);
    if (epfd < 0) die("epoll_create1: %s", strerror(errno));

    struct conn *conns = calloc((size_t)opt_conns, sizeof(*conns));
    for (int i = 0; i < opt_conns; i++) {
        struct conn *c = &conns[i];
        c->idx = i;
        c->fd = connect_to(ai);
        if (opt_ops == 0) c->quota = UINT64_MAX;
        else c->quota = opt_ops / (uint64_t)opt_conns + ((uint64_t)i < opt_ops % (uint64_t)opt_conns);
        c->qcap = 4 * (size_t)opt_pipeline + 16;
        c->q = malloc(c->qcap * sizeof(*c->q));
        setup_conn(c);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl: %s", strerror(errno));
    }
    freeaddrinfo(ai);
    g_conns_active = opt_conns;

    uint64_t t_start = now_ns();
    if (opt_seconds > 0) g_deadline_ns = t_start + (uint64_t)(opt_seconds * 1e9);
    for (int i = 0; i < opt_conns; i++) {
        issue_ops(&conns[i], t_start);
        flush_out(&conns[i], epfd);
        check_done(&conns[i], epfd);
    }

    const int MAXEV = 256;
    struct epoll_event evs[256];
    size_t rdchunk = 256 * 1024;
    uint64_t last_progress = now_ns();
    uint64_t t_end = t_start;
    while (g_conns_active > 0) {
        int timeout_ms = 100;
        int n = epoll_wait(epfd, evs, MAXEV, timeout_ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait: %s", strerror(errno));
        }
        uint64_t t = now_ns();
        if (g_deadline_ns && !g_deadline_hit && t >= g_deadline_ns) {
            g_deadline_hit = 1;
            for (int i = 0; i < opt_conns; i++) {
                conns[i].stopped = 1;
                check_done(&conns[i], epfd);
            }
        }
        if (n == 0) {
            if ((double)(t - last_progress) / 1e9 > opt_idle_timeout) {
                fprintf(stderr, "loadgen: no progress for %.0f s, giving up\n", opt_idle_timeout);
                for (int i = 0; i < opt_conns; i++) {
                    if (!conns[i].dead) {
                        g_errors += conns[i].inflight;
                        conns[i].inflight = 0;
                    }
                }
                break;
            }
            continue;
        }
        last_progress = t;
        for (int e = 0; e < n; e++) {
            struct conn *c = evs[e].data.ptr;
            if (c->dead) continue;
            if (evs[e].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                for (;;) {
                    buf_reserve(&c->in, rdchunk);
                    ssize_t r = read(c->fd, c->in.data + c->in.end, c->in.cap - c->in.end);
                    if (r > 0) {
                        c->in.end += (size_t)r;
                        if (c->in.end < c->in.cap) break; /* short read: drained for now */
                        continue;
                    }
                    if (r == 0) {
                        errno = ECONNRESET;
                        conn_kill(c, epfd, "server closed connection");
                        break;
                    }
                    if (errno == EINTR) continue;
                    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                    conn_kill(c, epfd, "read");
                    break;
                }
                if (c->dead == 1) continue;
                t = now_ns();
                if (parse_replies(c, t) < 0) {
                    errno = EPROTO;
                    conn_kill(c, epfd, "protocol desync");
                    continue;
                }
                t_end = t;
                issue_ops(c, t);
            }
            flush_out(c, epfd);
            check_done(c, epfd);
        }
    }

    double secs = (double)(t_end - t_start) / 1e9;
    if (secs <= 0) secs = 1e-9;
    uint64_t rx_tout = g_timed_out;
    printf("{\"ops\":%llu,\"seconds\":%.6f,\"ops_per_s\":%.1f,\"p50_us\":%llu,\"p90_us\":%llu,"
           "\"p99_us\":%llu,\"p999_us\":%llu,\"max_us\":%llu,\"mean_us\":%.1f,\"errors\":%llu,"
           "\"timed_out\":%llu,\"conns\":%d,\"pipeline\":%d,\"workload\":\"%s\"}\n",
           (unsigned long long)g_ops, secs, (double)g_ops / secs,
           (unsigned long long)hist_pct(0.50), (unsigned long long)hist_pct(0.90),
           (unsigned long long)hist_pct(0.99), (unsigned long long)hist_pct(0.999),
           (unsigned long long)lat_max_us, g_ops ? (double)lat_sum_us / (double)g_ops : 0.0,
           (unsigned long long)g_errors, (unsigned long long)rx_tout, opt_conns, opt_pipeline,
           opt_workload == W_PUT ? "put" : opt_workload == W_RD ? "reserve-delete" : "put-reserve-delete");
    fflush(stdout);
    return 0;
}

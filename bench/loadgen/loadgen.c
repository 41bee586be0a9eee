/*
 * loadgen: a small epoll-based beanstalk-protocol load generator.
 *
 * Build:  gcc -O2 -Wall -o loadgen bench/loadgen/loadgen.c (python -m bench builds it)
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

enum workload { W_PUT = FIRST_ONLY, W_RD = SECOND_ONLY, W_PRD = FIRST_AND_SECOND };
static const char *const workload_names[] = {"put", "reserve-delete", "put-reserve-delete"};

/* What a pending reply is expected to be. */
enum expect {
    E_INSERTED_FINAL = EXPECT_FIRST_LAST, /* put workload: INSERTED completes the op */
    E_INSERTED = EXPECT_FIRST,            /* put-reserve-delete: INSERTED, op continues */
    E_RESERVED = EXPECT_SECOND,           /* RESERVED -> send delete; TIMED_OUT -> tube empty */
    E_DELETED,                            /* DELETED completes the op */
};

/* ---- options (the common ones are in loadgen_common.h) ---- */
static const char *opt_host = "127.0.0.1";
static int opt_port = 11300;
static int opt_tubes = 1;
static const char *opt_prefix = "tube-";
static int opt_pri = 0, opt_delay = 0, opt_ttr = 120;

/* ---- global state ---- */
static char *put_cmd;
static size_t put_cmd_len;
static const char reserve_cmd[] = "reserve-with-timeout 0\r\n";
static uint64_t g_timed_out;


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

/* ---- op issuing: a put first, a reserve second ---- */
static void append_first(struct conn *c) {
    buf_append(&c->out, put_cmd, put_cmd_len);
}

static void append_second(struct conn *c) {
    buf_append(&c->out, reserve_cmd, sizeof(reserve_cmd) - 1);
}

static void report_conn_error(struct conn *c, const char *why) {
    report_error(c, why, strerror(errno), strlen(strerror(errno)));
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
}

/* ---- --serve: the fake server's beanstalkd (loadgen_common.h's fake_serve) ---- */

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

static void usage(void) {
    fprintf(stderr,
            "usage: loadgen [--host H] [--port P] [--conns N] [--pipeline K] [--ops TOTAL]\n"
            "               [--workload put|reserve-delete|put-reserve-delete] [--tubes T]\n"
            "               [--body BYTES] [--seconds S] [--tube-prefix P] [--idle-timeout S]\n"
            "               [--pri N] [--delay N] [--ttr N]\n"
            "       loadgen --serve PORT [--host ADDR] [--body BYTES]   (fake server, for self-tests)\n");
    exit(2);
}

static int own_flag(const char *a) {
    (void)a;
    return 0;
}

static int own_option(const char *a, const char *v) {
    static const struct int_option ints[] = {{"--port", &opt_port}, {"--tubes", &opt_tubes},
        {"--pri", &opt_pri}, {"--delay", &opt_delay}, {"--ttr", &opt_ttr}, {NULL, NULL}};
    if (!strcmp(a, "--host")) opt_host = v;
    else if (!strcmp(a, "--tube-prefix")) opt_prefix = v;
    else return int_option(ints, a, v);
    return 1;
}

int main(int argc, char **argv) {
    parse_options(argc, argv);
    if (opt_tubes < 1) die("bad arguments");
    if (opt_serve_port > 0) return fake_serve(opt_host, opt_serve_port);
    if (opt_ops == 0 && opt_seconds <= 0) die("--ops 0 needs --seconds");

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

    struct conn *conns = new_conns();
    for (int i = 0; i < opt_conns; i++) {
        struct conn *c = &conns[i];
        c->fd = connect_to(ai);
        setup_conn(c);
    }
    freeaddrinfo(ai);

    uint64_t t_start, t_end;
    run_loop(conns, &t_start, &t_end);
    print_common_fields(t_start, t_end);
    printf("\"timed_out\":%llu,\"conns\":%d,\"pipeline\":%d,\"workload\":\"%s\"}\n",
           (unsigned long long)g_timed_out, opt_conns, opt_pipeline, workload_names[opt_workload]);
    fflush(stdout);
    return 0;
}

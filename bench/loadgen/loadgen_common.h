/*
 * loadgen_common.h: what bench/loadgen/loadgen.c (beanstalk) and resp_loadgen.c (RESP) share:
 * the options every generator takes, die(), the clock, the latency histogram, the growable
 * buffers, the connections' queues of pending replies, writing and closing them, the epoll
 * loop that drives them, the fake server of --serve and the JSON line's common fields.
 *
 * A single-translation-unit header (everything static): each generator includes it once,
 * after its own includes, having defined LOADGEN_NAME (the prefix of its messages) and, if its
 * connections carry more than the common fields, LOADGEN_CONN_EXTRA (more struct members) and
 * LOADGEN_OP_DONE_EXTRA(c) (what a completed op also counts). The generator then defines its
 * workload_names and the hooks declared below: its two commands (append_first,
 * append_second), how replies are read (parse_replies), how a dropped connection is reported
 * (report_conn_error), its own options (own_flag, own_option, usage) and the fake server's
 * replies (fake_process).
 */
#ifndef LOADGEN_COMMON_H
#define LOADGEN_COMMON_H

#ifndef LOADGEN_CONN_EXTRA
#define LOADGEN_CONN_EXTRA
#endif
#ifndef LOADGEN_OP_DONE_EXTRA
#define LOADGEN_OP_DONE_EXTRA(c) ((void)(c))
#endif

struct buf {
    char *data;
    size_t start, end, cap;
};

/* What a pending reply is expected to be: each generator's own enum expect. */
struct pending {
    uint8_t type;
    uint8_t failed; /* the op already had an error (its first command failed) */
    uint64_t t0;    /* ns, time the op's first command was sent */
};

struct conn {
    int fd;
    int idx;
    int dead;     /* 1: closed on an error; 2: finished */
    int stopped;  /* no more ops are issued (queue empty, quota or deadline) */
    int want_out; /* EPOLLOUT registered */
    uint64_t quota, issued, inflight;
    struct buf in, out;
    struct pending *q; /* ring */
    size_t qhead, qlen, qcap;
    LOADGEN_CONN_EXTRA
};

/* ---- the options every generator takes ---- */
static int opt_conns = 1;
static int opt_pipeline = 1;
static uint64_t opt_ops = 100000;
static int opt_body = 100;
static double opt_seconds = 0;
static double opt_idle_timeout = 30;
static int opt_serve_port = 0;

/* ---- global state ---- */
static uint64_t g_ops, g_errors;
static uint64_t g_deadline_ns; /* 0 = none */
static int g_deadline_hit;
static int g_conns_active;

/*
 * Every workload's op sends the first command (a put, ADDJOB), the second (a reserve, GETJOB)
 * or both, in that order; the second's reply may call for a follow-up (delete, ACKJOB). A
 * generator's enum workload names these three in this order, and its enum expect starts with
 * the replies they leave pending.
 */
enum { FIRST_ONLY, SECOND_ONLY, FIRST_AND_SECOND };
enum { EXPECT_FIRST_LAST, EXPECT_FIRST, EXPECT_SECOND };
static int opt_workload = FIRST_ONLY;
static const char *const workload_names[3]; /* the generator's, in that order */

/* ---- each generator's own ---- */
struct fconn;
static void append_first(struct conn *c);
static void append_second(struct conn *c);
static int parse_replies(struct conn *c, uint64_t t); /* -1: out of sync, drop it */
static void report_conn_error(struct conn *c, const char *why);
static void fake_process(struct fconn *f);

/* Latency histogram (microseconds): exact below 1024, then 512 sub-buckets per power of 2. */
#define HSUB 512
#define HGROUPS 44
#define HBUCKETS (1024 + HGROUPS * HSUB)
static uint64_t hist[HBUCKETS];
static uint64_t lat_max_us, lat_sum_us;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", LOADGEN_NAME);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void hist_add(uint64_t us) {
    size_t idx;
    if (us < 1024) {
        idx = (size_t)us;
    } else {
        int e = 63 - __builtin_clzll(us); /* >= 10 */
        int shift = e - 9;
        uint64_t m = us >> shift; /* 512..1023 */
        size_t g = (size_t)(e - 10);
        if (g >= HGROUPS) g = HGROUPS - 1, m = 1023;
        idx = 1024 + g * HSUB + (size_t)(m - 512);
    }
    hist[idx]++;
    if (us > lat_max_us) lat_max_us = us;
    lat_sum_us += us;
}

static uint64_t hist_value(size_t idx) {
    if (idx < 1024) return idx;
    size_t g = (idx - 1024) / HSUB;
    uint64_t m = (idx - 1024) % HSUB + 512;
    int shift = (int)g + 1;
    return (m << shift) + ((1ull << shift) >> 1); /* bucket midpoint */
}

static uint64_t hist_pct(double p) {
    uint64_t total = 0;
    for (size_t i = 0; i < HBUCKETS; i++) total += hist[i];
    if (total == 0) return 0;
    uint64_t want = (uint64_t)(p * (double)total);
    if (want >= total) want = total - 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < HBUCKETS; i++) {
        seen += hist[i];
        if (seen > want) {
            uint64_t v = hist_value(i);
            return v > lat_max_us ? lat_max_us : v;
        }
    }
    return lat_max_us;
}

/* ---- buffers ---- */
static void buf_reserve(struct buf *b, size_t n) {
    if (b->cap - b->end >= n) return;
    if (b->start > 0) { /* compact first */
        memmove(b->data, b->data + b->start, b->end - b->start);
        b->end -= b->start;
        b->start = 0;
        if (b->cap - b->end >= n) return;
    }
    size_t nc = b->cap ? b->cap : 4096;
    while (nc - b->end < n) nc *= 2;
    b->data = realloc(b->data, nc);
    if (!b->data) die("out of memory");
    b->cap = nc;
}

static inline void buf_append(struct buf *b, const char *s, size_t n) {
    buf_reserve(b, n);
    memcpy(b->data + b->end, s, n);
    b->end += n;
}

/* Write v in decimal to out (no terminator); returns the number of characters. */
static inline size_t fmt_u64(char *out, uint64_t v) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

/* ---- options ---- */
/* The index of v in names (n of them); dies if v is none of them. */
static int name_index(const char *v, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) return i;
    die("unknown workload '%s'", v);
    return -1;
}

/* Takes option a with value v if it is one of the common ones; 0 if it is not. */
static int common_option(const char *a, const char *v) {
    if (!strcmp(a, "--conns")) opt_conns = atoi(v);
    else if (!strcmp(a, "--pipeline")) opt_pipeline = atoi(v);
    else if (!strcmp(a, "--ops")) opt_ops = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--body")) opt_body = atoi(v);
    else if (!strcmp(a, "--seconds")) opt_seconds = atof(v);
    else if (!strcmp(a, "--idle-timeout")) opt_idle_timeout = atof(v);
    else if (!strcmp(a, "--serve")) opt_serve_port = atoi(v);
    else if (!strcmp(a, "--workload")) opt_workload = name_index(v, workload_names, 3);
    else return 0;
    return 1;
}

/* An option of a generator's own that takes an int. */
struct int_option {
    const char *name;
    int *dest;
};

/* Takes option a with value v if specs (ended by a NULL name) has it; 0 if not. */
static int int_option(const struct int_option *specs, const char *a, const char *v) {
    for (; specs->name; specs++) {
        if (!strcmp(a, specs->name)) {
            *specs->dest = atoi(v);
            return 1;
        }
    }
    return 0;
}

static int own_flag(const char *a);                /* a flag without a value; 0 if not one */
static int own_option(const char *a, const char *v); /* 0 if a is not the generator's */
static void usage(void);

/* Reads argv: -h, the common options, then the generator's own (own_flag, own_option). */
static void parse_options(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage();
        if (own_flag(a)) continue;
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!common_option(a, v) && !own_option(a, v)) {
            fprintf(stderr, "%s: unknown option %s\n", LOADGEN_NAME, a);
            usage();
        }
    }
    if (opt_conns < 1 || opt_pipeline < 1 || opt_body < 0) die("bad arguments");
    signal(SIGPIPE, SIG_IGN);
}

/* ---- a connection's queue of pending replies ---- */
/* --conns connections, not yet connected: each with its share of --ops and an empty queue
 * sized for its pipeline. */
static struct conn *new_conns(void) {
    struct conn *conns = calloc((size_t)opt_conns, sizeof(*conns));
    if (!conns) die("out of memory");
    for (int i = 0; i < opt_conns; i++) {
        struct conn *c = &conns[i];
        c->idx = i;
        if (opt_ops == 0) c->quota = UINT64_MAX;
        else c->quota = opt_ops / (uint64_t)opt_conns + ((uint64_t)i < opt_ops % (uint64_t)opt_conns);
        c->qcap = 4 * (size_t)opt_pipeline + 16;
        c->q = malloc(c->qcap * sizeof(*c->q));
        if (!c->q) die("out of memory");
    }
    return conns;
}

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

/* Keep up to --pipeline ops in flight, within the connection's quota and the deadline. */
static void issue_ops(struct conn *c, uint64_t t) {
    if (c->dead) return;
    if (g_deadline_hit) c->stopped = 1;
    while (!c->stopped && c->inflight < (uint64_t)opt_pipeline && c->issued < c->quota) {
        if (opt_workload != SECOND_ONLY) append_first(c);
        if (opt_workload != FIRST_ONLY) append_second(c);
        if (opt_workload == FIRST_ONLY) q_push(c, EXPECT_FIRST_LAST, t, 0);
        if (opt_workload == FIRST_AND_SECOND) q_push(c, EXPECT_FIRST, t, 0);
        if (opt_workload != FIRST_ONLY) q_push(c, EXPECT_SECOND, t, 0);
        c->issued++;
        c->inflight++;
    }
    if (c->issued >= c->quota) c->stopped = 1;
}

static void op_done(struct conn *c, uint64_t t0, uint64_t t, int ok) {
    c->inflight--;
    if (ok) {
        g_ops++;
        LOADGEN_OP_DONE_EXTRA(c);
        hist_add((t - t0) / 1000);
    }
}

/* ---- writing and closing connections ---- */
static void conn_kill(struct conn *c, int epfd, const char *why) {
    if (c->dead) return;
    if (why) report_conn_error(c, why);
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->dead = 1;
    c->stopped = 1;
    g_errors += c->inflight; /* ops that will never complete */
    c->inflight = 0;
    c->qlen = 0;
    g_conns_active--;
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

/* A blocking write of all of s (the connections' set-up, before the loop). */
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

/* Read what a connection has, until the socket is drained; 0 if it was closed (killed). */
static int conn_read(struct conn *c, int epfd) {
    size_t rdchunk = 256 * 1024;
    for (;;) {
        buf_reserve(&c->in, rdchunk);
        ssize_t r = read(c->fd, c->in.data + c->in.end, c->in.cap - c->in.end);
        if (r > 0) {
            c->in.end += (size_t)r;
            if (c->in.end < c->in.cap) return 1; /* short read: drained for now */
            continue;
        }
        if (r == 0) {
            errno = ECONNRESET;
            conn_kill(c, epfd, "server closed connection");
            return 0;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
        conn_kill(c, epfd, "read");
        return 0;
    }
}

/*
 * Drive the connections (set up, blocking ones) until every one has finished: issue ops,
 * read and parse replies, stop issuing at the deadline of --seconds and drain what is in
 * flight. *t_start and *t_end get the times of the first op and the last reply. Returns 1 if
 * it gave up (no progress for --idle-timeout seconds: the ops in flight count as errors).
 */
static int run_loop(struct conn *conns, uint64_t *t_start, uint64_t *t_end) {
    int epfd = epoll_create1(0);
    if (epfd < 0) die("epoll_create1: %s", strerror(errno));
    for (int i = 0; i < opt_conns; i++) {
        fcntl(conns[i].fd, F_SETFL, fcntl(conns[i].fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &conns[i]};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, conns[i].fd, &ev) < 0)
            die("epoll_ctl: %s", strerror(errno));
    }
    g_conns_active = opt_conns;
    *t_start = *t_end = now_ns();
    if (opt_seconds > 0) g_deadline_ns = *t_start + (uint64_t)(opt_seconds * 1e9);
    for (int i = 0; i < opt_conns; i++) {
        issue_ops(&conns[i], *t_start);
        flush_out(&conns[i], epfd);
        check_done(&conns[i], epfd);
    }
    struct epoll_event evs[256];
    uint64_t last_progress = now_ns();
    while (g_conns_active > 0) {
        int n = epoll_wait(epfd, evs, 256, 100);
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
                fprintf(stderr, "%s: no progress for %.0f s, giving up\n", LOADGEN_NAME,
                        opt_idle_timeout);
                for (int i = 0; i < opt_conns; i++) {
                    if (!conns[i].dead) {
                        g_errors += conns[i].inflight;
                        conns[i].inflight = 0;
                    }
                }
                return 1;
            }
            continue;
        }
        last_progress = t;
        for (int e = 0; e < n; e++) {
            struct conn *c = evs[e].data.ptr;
            if (c->dead) continue;
            if (evs[e].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                if (!conn_read(c, epfd)) continue;
                t = now_ns();
                if (parse_replies(c, t) < 0) {
                    errno = EPROTO;
                    conn_kill(c, epfd, "protocol desync");
                    continue;
                }
                *t_end = t;
                issue_ops(c, t);
            }
            flush_out(c, epfd);
            check_done(c, epfd);
        }
    }
    return 0;
}

/* The JSON line's common fields, up to and including "errors" and its comma: the generator
 * prints its own fields after them and closes the object. */
static void print_common_fields(uint64_t t_start, uint64_t t_end) {
    double secs = (double)(t_end - t_start) / 1e9;
    if (secs <= 0) secs = 1e-9;
    printf("{\"ops\":%llu,\"seconds\":%.6f,\"ops_per_s\":%.1f,\"p50_us\":%llu,\"p90_us\":%llu,"
           "\"p99_us\":%llu,\"p999_us\":%llu,\"max_us\":%llu,\"mean_us\":%.1f,\"errors\":%llu,",
           (unsigned long long)g_ops, secs, (double)g_ops / secs,
           (unsigned long long)hist_pct(0.50), (unsigned long long)hist_pct(0.90),
           (unsigned long long)hist_pct(0.99), (unsigned long long)hist_pct(0.999),
           (unsigned long long)lat_max_us, g_ops ? (double)lat_sum_us / (double)g_ops : 0.0,
           (unsigned long long)g_errors);
}

/* ---- --serve: a trivial in-memory fake server, to measure a generator's own ceiling ---- */
struct fconn {
    int fd;
    struct buf in, out;
};

static int fake_serve(const char *host, int port) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0) die("bind: %s", strerror(errno));
    if (listen(lfd, 1024) < 0) die("listen: %s", strerror(errno));
    int epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev);
    fprintf(stderr, "%s: fake server listening on %s:%d\n", LOADGEN_NAME, host, port);
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

#endif

/*
 * loadgen_common.h: what scripts/loadgen.c (beanstalk) and scripts/resp_loadgen.c (RESP)
 * share: die(), the clock, the latency histogram, the growable output buffer and a decimal
 * formatter. A single-translation-unit header (everything static): each generator includes
 * it once, after its own includes, and defines LOADGEN_NAME (the prefix of error messages).
 */
#ifndef LOADGEN_COMMON_H
#define LOADGEN_COMMON_H

struct buf {
    char *data;
    size_t start, end, cap;
};

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

#endif

/*
 * Route-query load in C: one thread, epoll, many TCP connections.
 *
 * The Python generators of route_query.py cost the load core more per request than the server
 * under test costs its own, so at high rates they measure themselves: an open loop at 30,000/s
 * from Python shows the generator's pauses as the server's p99. This one polls its core in
 * the open loop and counts every latency from the request's scheduled send time (open loop)
 * or its send time (closed loop).
 *
 *   loadgen HOST PORT CONNS DEPTH RATE SECONDS FRAMES_FILE
 *
 * RATE > 0: open loop, RATE requests a second spread evenly over CONNS connections, never
 * waiting for answers (DEPTH unused). RATE == 0: closed loop, DEPTH requests in flight on
 * each connection. FRAMES_FILE holds request frames back to back (RocketMQ framing: a 4-byte
 * big-endian length, then that many bytes); connection i sends them in turn from frame i*997.
 * Answers come back in request order on one connection, which pairs them with send times.
 *
 * Prints one JSON object: answered, seconds, and latency percentiles in microseconds.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint64_t *items;
    size_t head, count, cap;
} ring_t;

typedef struct {
    int fd;
    ring_t sent;      /* scheduled (open) or actual (closed) send times, ns */
    char *out;        /* bytes not yet written */
    size_t out_len, out_off, out_cap;
    char in[65536];   /* an answer's bytes until it is complete */
    size_t in_len;
    uint64_t next_frame, scheduled, offset_ns;
} conn_t;

static const char **frames;
static size_t *frame_lens, frame_count;
static uint64_t *latencies;
static size_t lat_count, lat_cap;

static void die(const char *what) {
    perror(what);
    exit(2);
}

static void *grow(void *p, size_t bytes) {
    void *q = realloc(p, bytes);
    if (!q) die("realloc");
    return q;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void ring_push(ring_t *r, uint64_t v) {
    if (r->count == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        uint64_t *items = grow(NULL, cap * sizeof *items);
        for (size_t i = 0; i < r->count; i++) items[i] = r->items[(r->head + i) % r->cap];
        free(r->items);
        r->items = items, r->head = 0, r->cap = cap;
    }
    r->items[(r->head + r->count++) % r->cap] = v;
}

static uint64_t ring_pop(ring_t *r) {
    uint64_t v = r->items[r->head];
    r->head = (r->head + 1) % r->cap, r->count--;
    return v;
}

static void queue_frame(conn_t *c, uint64_t at) {
    size_t i = c->next_frame++ % frame_count, n = frame_lens[i];
    if (c->out_len + n > c->out_cap) {
        c->out_cap = (c->out_len + n) * 2;
        c->out = grow(c->out, c->out_cap);
    }
    memcpy(c->out + c->out_len, frames[i], n);
    c->out_len += n;
    ring_push(&c->sent, at);
}

static void flush(conn_t *c) {
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) return;
            die("send");
        }
        c->out_off += (size_t)n;
    }
    c->out_off = c->out_len = 0;
}

/* Reads what is there; returns the number of answers completed. */
static size_t receive(conn_t *c, uint64_t now) {
    size_t answered = 0;
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, 0);
        if (n == 0) {
            fprintf(stderr, "loadgen: server closed a connection\n");
            exit(2);
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) return answered;
            die("recv");
        }
        c->in_len += (size_t)n;
        size_t at = 0;
        while (c->in_len - at >= 4) {
            uint32_t len;
            memcpy(&len, c->in + at, 4);
            len = ntohl(len);
            if (len + 4 > sizeof c->in) {
                fprintf(stderr, "loadgen: answer of %u bytes is larger than the buffer\n", len);
                exit(2);
            }
            if (c->in_len - at < len + 4) break;
            at += len + 4;
            if (lat_count == lat_cap) {
                lat_cap = lat_cap ? lat_cap * 2 : 1 << 16;
                latencies = grow(latencies, lat_cap * sizeof *latencies);
            }
            latencies[lat_count++] = now - ring_pop(&c->sent);
            answered++;
        }
        memmove(c->in, c->in + at, c->in_len - at);
        c->in_len -= at;
    }
}

static void load_frames(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die(path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *data = grow(NULL, (size_t)size);
    if (fread(data, 1, (size_t)size, f) != (size_t)size) die("fread");
    fclose(f);
    for (long at = 0; at + 4 <= size;) {
        uint32_t len;
        memcpy(&len, data + at, 4);
        len = ntohl(len);
        frames = grow(frames, (frame_count + 1) * sizeof *frames);
        frame_lens = grow(frame_lens, (frame_count + 1) * sizeof *frame_lens);
        frames[frame_count] = data + at, frame_lens[frame_count++] = len + 4;
        at += (long)len + 4;
    }
    if (!frame_count) {
        fprintf(stderr, "loadgen: no frame in %s\n", path);
        exit(2);
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_us(double p) {
    if (!lat_count) return 0.0;
    size_t i = (size_t)(p * (double)lat_count);
    return (double)latencies[i < lat_count ? i : lat_count - 1] / 1000.0;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: loadgen HOST PORT CONNS DEPTH RATE SECONDS FRAMES_FILE\n");
        return 2;
    }
    int nconns = atoi(argv[3]), depth = atoi(argv[4]);
    double rate = atof(argv[5]), seconds = atof(argv[6]);
    load_frames(argv[7]);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) die("address");

    int ep = epoll_create1(0);
    conn_t *conns = calloc((size_t)nconns, sizeof *conns);
    if (ep < 0 || !conns) die("setup");
    uint64_t interval = rate > 0 ? (uint64_t)(1e9 * nconns / rate) : 0;
    for (int i = 0; i < nconns; i++) {
        conn_t *c = &conns[i];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
        fcntl(c->fd, F_SETFL, O_NONBLOCK);
        c->next_frame = (uint64_t)i * 997;
        c->offset_ns = interval * (uint64_t)i / (uint64_t)nconns; /* phases spread */
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
    }

    uint64_t start = now_ns() + 50000000u, stop = start + (uint64_t)(seconds * 1e9);
    uint64_t per_conn = interval ? (uint64_t)(seconds * 1e9) / interval : 0;
    while (now_ns() < start) {
    }
    if (!interval)
        for (int i = 0; i < nconns; i++) {
            for (int k = 0; k < depth; k++) queue_frame(&conns[i], now_ns());
            flush(&conns[i]);
        }
    struct epoll_event events[1024];
    uint64_t drain_until = stop + 10000000000u;
    for (;;) {
        uint64_t now = now_ns();
        int outstanding = 0;
        for (int i = 0; i < nconns; i++) {
            conn_t *c = &conns[i];
            if (interval)
                while (c->scheduled < per_conn && start + c->offset_ns + c->scheduled * interval <= now)
                    queue_frame(c, start + c->offset_ns + c->scheduled++ * interval);
            if (c->out_len) flush(c);
            outstanding |= c->sent.count > 0 || (interval && c->scheduled < per_conn);
        }
        if ((now >= stop && !outstanding) || now >= drain_until) break;
        /* Open loop polls (a send is due every few microseconds); closed loop sleeps until an
           answer arrives, which leaves the core to others on a shared machine. */
        int n = epoll_wait(ep, events, 1024, interval ? 0 : 1);
        now = now_ns();
        for (int e = 0; e < n; e++) {
            conn_t *c = &conns[events[e].data.u32];
            size_t answered = receive(c, now);
            if (!interval && now < stop) {
                for (size_t k = 0; k < answered; k++) queue_frame(c, now);
                flush(c);
            }
        }
    }
    size_t lost = 0;
    for (int i = 0; i < nconns; i++) lost += conns[i].sent.count, close(conns[i].fd);
    qsort(latencies, lat_count, sizeof *latencies, cmp_u64);
    printf("{\"answered\": %zu, \"unanswered\": %zu, \"seconds\": %.3f, \"p50_us\": %.1f, "
           "\"p99_us\": %.1f, \"p999_us\": %.1f, \"max_us\": %.1f}\n",
           lat_count, lost, seconds, pct_us(0.5), pct_us(0.99), pct_us(0.999),
           lat_count ? (double)latencies[lat_count - 1] / 1000.0 : 0.0);
    return lost ? 1 : 0;
}

/*
 * latency_proxy.c — a delaying loopback TCP proxy (see latency_proxy.h).
 *
 * Each connection thread polls both sockets (waking for the next release or every 20 ms
 * for the stop flag): bytes from the client are
 * written to the server at once; bytes from the server are appended to a FIFO of chunks
 * stamped with their release time (arrival + delay) and written to the client once that
 * time has passed. Either side closing ends the connection (both sockets closed).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tier/redis/latency_proxy.h"

typedef struct chunk {
    struct chunk *next;
    double release_ms;
    size_t len, off;
    char data[];
} chunk_t;

typedef struct {
    test_proxy_t *p;
    int client, server;
} conn_t;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool write_all(int fd, const char *b, size_t n)
{
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

static void *conn_main(void *arg)
{
    conn_t c = *(conn_t *)arg;
    free(arg);
    chunk_t *head = NULL, *tail = NULL;
    char buf[65536];
    bool open = true;
    while (open && !atomic_load(&c.p->stop)) {
        struct pollfd fds[2] = {{c.client, POLLIN, 0}, {c.server, POLLIN, 0}};
        int wait = 20; /* the stop flag is looked at this often */
        if (head) {
            double until = head->release_ms - now_ms();
            wait = until <= 0 ? 0 : until < 20 ? (int)until + 1 : 20;
        }
        if (poll(fds, 2, wait) < 0 && errno != EINTR)
            break;
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = recv(c.client, buf, sizeof buf, 0);
            open = n > 0 && write_all(c.server, buf, (size_t)n);
        }
        if (open && fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = recv(c.server, buf, sizeof buf, 0);
            chunk_t *k = n > 0 ? malloc(sizeof *k + (size_t)n) : NULL;
            if (k) {
                k->next = NULL;
                k->release_ms = now_ms() + atomic_load(&c.p->delay_ms);
                k->len = (size_t)n;
                k->off = 0;
                memcpy(k->data, buf, (size_t)n);
                if (tail)
                    tail->next = k;
                else
                    head = k;
                tail = k;
            } else {
                open = false;
            }
        }
        double now = now_ms();
        while (open && head && head->release_ms <= now) {
            chunk_t *k = head;
            open = write_all(c.client, k->data, k->len);
            head = k->next;
            if (!head)
                tail = NULL;
            free(k);
        }
    }
    while (head) {
        chunk_t *k = head;
        head = k->next;
        free(k);
    }
    close(c.client);
    close(c.server);
    return NULL;
}

static int connect_target(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void *accept_main(void *arg)
{
    test_proxy_t *p = arg;
    while (!atomic_load(&p->stop)) {
        struct pollfd pf = {p->listen_fd, POLLIN, 0};
        if (poll(&pf, 1, 20) <= 0)
            continue;
        int cl = accept(p->listen_fd, NULL, NULL);
        if (cl < 0)
            continue;
        int one = 1;
        setsockopt(cl, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int sv = connect_target(p->target_port);
        conn_t *c = sv >= 0 && p->n_conns < TEST_PROXY_MAX_CONNS ? malloc(sizeof *c) : NULL;
        if (!c) {
            close(cl);
            if (sv >= 0)
                close(sv);
            continue;
        }
        *c = (conn_t){p, cl, sv};
        if (pthread_create(&p->conns[p->n_conns], NULL, conn_main, c)) {
            free(c);
            close(cl);
            close(sv);
            continue;
        }
        p->n_conns++;
    }
    return NULL;
}

int test_proxy_start(test_proxy_t *p, int target_port, int delay_ms)
{
    memset(p, 0, sizeof *p);
    p->target_port = target_port;
    atomic_store(&p->delay_ms, delay_ms);
    atomic_store(&p->stop, false);
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (p->listen_fd < 0)
        return -1;
    int one = 1;
    setsockopt(p->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    if (bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) || listen(p->listen_fd, 16) ||
        getsockname(p->listen_fd, (struct sockaddr *)&a, &l)) {
        fprintf(stderr, "latency proxy: cannot listen: %s\n", strerror(errno));
        close(p->listen_fd);
        return -1;
    }
    p->port = ntohs(a.sin_port);
    snprintf(p->url, sizeof p->url, "redis://127.0.0.1:%d", p->port);
    if (pthread_create(&p->acceptor, NULL, accept_main, p)) {
        close(p->listen_fd);
        return -1;
    }
    return 0;
}

void test_proxy_set_delay(test_proxy_t *p, int delay_ms) { atomic_store(&p->delay_ms, delay_ms); }

void test_proxy_stop(test_proxy_t *p)
{
    atomic_store(&p->stop, true);
    pthread_join(p->acceptor, NULL);
    for (int i = 0; i < p->n_conns; i++)
        pthread_join(p->conns[i], NULL);
    close(p->listen_fd);
}

/*
 * latency_proxy.h — a loopback TCP proxy for the shared tier's tests that delays every
 * byte the server sends by a set number of milliseconds: a slow Redis (a distant one, or
 * one on a loaded machine) without touching the server. Client-to-server bytes pass at
 * once; server-to-client bytes are held until `delay_ms` after they arrived, in order.
 * The delay can change while connections are open (it applies to bytes arriving after).
 *
 * Thread-safety: one accept thread and one thread per connection, all the proxy's own;
 * test_proxy_set_delay may be called from any thread. Listens on 127.0.0.1 only and
 * connects to 127.0.0.1 only.
 */
#ifndef TEST_LATENCY_PROXY_H
#define TEST_LATENCY_PROXY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>

#define TEST_PROXY_MAX_CONNS 32

typedef struct {
    int listen_fd;
    int port;                  /* where clients connect */
    int target_port;           /* the server's */
    char url[64];              /* redis://127.0.0.1:PORT (the proxy) */
    atomic_int delay_ms;
    atomic_bool stop;
    pthread_t acceptor;
    pthread_t conns[TEST_PROXY_MAX_CONNS];
    int n_conns;
} test_proxy_t;

/* Starts a proxy to 127.0.0.1:target_port on a free loopback port. 0, or -1 (message on
 * stderr). */
int test_proxy_start(test_proxy_t *p, int target_port, int delay_ms);
void test_proxy_set_delay(test_proxy_t *p, int delay_ms);
/* Closes every connection and joins every thread. */
void test_proxy_stop(test_proxy_t *p);

#endif

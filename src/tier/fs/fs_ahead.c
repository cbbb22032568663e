/*
 * fs_ahead.c — the filesystem store's read-ahead for restores: a prefetch hint becomes a
 * read already in flight when the walk asks for the object.
 *
 * Model: a restore walk hints the store a few objects ahead of the one it reads
 * (cairn_tier_restore_chain: 16). Each hinted object is opened once and kept in a table
 * (FS_AHEAD_SLOTS entries, oldest first) for the read that follows:
 *   direct   (liburing built in, the store's layout known, CAIRN_COLD_DIRECT not 0, the
 *            filesystem accepts O_DIRECT) the whole object is read with O_DIRECT through
 *            one io_uring into one of n_dbuf page-aligned buffers (at most FS_DIRECT_BUFS,
 *            FS_DIRECT_BYTES in all; mapped at the first hint, kept until destroy): the
 *            device fills the buffer by DMA while the walk validates and copies the
 *            previous objects, no page cache page is allocated, filled, copied or
 *            evicted, and several reads are in flight at once;
 *   buffered otherwise the descriptor is kept after posix_fadvise(POSIX_FADV_WILLNEED)
 *            (the kernel reads ahead into the page cache; the read copies from it).
 * The read (fs__take_ahead) takes the entry out of the table, waiting for a direct read to
 * complete; the reader validates the buffer's bytes exactly as a read of the file (size,
 * header, identity, tokens, both checksums, fs_store.c) and hands the buffer back
 * (fs__give_back). A full table, or all buffers in flight, retires its oldest entry (a
 * direct one waits for its read first). Only the name counts: the reader drops an entry
 * whose object left the index since its hint and opens the name again.
 * Buffers are read into by the kernel only while INFLIGHT, read by one reader only while
 * TAKEN, and reused only when FREE. A buffer's read is sized past the expected object so
 * that a longer file reads more than expected (the exact size check sees it), and a short
 * read is a truncated object.
 * Thread-safety: everything under s->amu (the ring is only touched under it, and waiting
 * for a completion holds it: a concurrent hint waits behind one object's read). A store
 * used after fork() in a child never touches its parent's ring (direct reads are off
 * there).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef CAIRN_HAVE_URING
#include <liburing.h>
#endif

#include "tier/fs/fs_store_impl.h"

enum { DBUF_FREE = 0, DBUF_INFLIGHT, DBUF_DONE, DBUF_TAKEN };

/* Index of h in the table, or n_ahead. Caller holds amu. */
static uint32_t ahead_find_locked(const cairn_cold_store_t *s, const cairn_tier_hash_t *h)
{
    uint32_t i = 0;
    while (i < s->n_ahead && memcmp(s->ahead[i].hash.bytes, h->bytes, 32))
        i++;
    return i;
}

/* Takes entry i out of the table. Caller holds amu. */
static fs_ahead_t ahead_take_locked(cairn_cold_store_t *s, uint32_t i)
{
    fs_ahead_t a = s->ahead[i];
    memmove(s->ahead + i, s->ahead + i + 1, (s->n_ahead - i - 1) * sizeof *s->ahead);
    s->n_ahead--;
    return a;
}

#ifdef CAIRN_HAVE_URING
/* Waits until buffer b's read completed (every completion reaped meanwhile is recorded
 * for its own buffer). Caller holds amu. */
static void reap_until_locked(cairn_cold_store_t *s, int b)
{
    struct io_uring *ring = s->ring;
    while (s->dbuf[b].state == DBUF_INFLIGHT) {
        if (s->ring_pid != getpid()) {
            /* A forked child: the ring is its parent's; the read reads buffered. */
            s->dbuf[b].res = -EIO;
            s->dbuf[b].state = DBUF_DONE;
            return;
        }
        struct io_uring_cqe *cqe;
        int r = io_uring_wait_cqe(ring, &cqe);
        if (r == -EINTR || r == -EAGAIN)
            continue;
        if (r < 0) {
            /* The ring itself failed: no more direct reads; this one reads buffered. */
            s->direct = 0;
            s->dbuf[b].res = -EIO;
            s->dbuf[b].state = DBUF_DONE;
            return;
        }
        const uint64_t d = io_uring_cqe_get_data64(cqe);
        if (d < s->n_dbuf && s->dbuf[d].state == DBUF_INFLIGHT) {
            s->dbuf[d].res = cqe->res;
            s->dbuf[d].state = DBUF_DONE;
        }
        io_uring_cqe_seen(ring, cqe);
    }
}
#else
static void reap_until_locked(cairn_cold_store_t *s, int b)
{
    (void)s;
    (void)b;
}
#endif

/* Closes an entry that no reader will take (its direct read completed first). Caller
 * holds amu. */
static void retire_locked(cairn_cold_store_t *s, fs_ahead_t a)
{
    if (a.buf >= 0) {
        reap_until_locked(s, a.buf);
        s->dbuf[a.buf].state = DBUF_FREE;
    }
    close(a.fd);
}

/* Sets up direct reads at the first hint: the ring and the buffers. Caller holds amu. */
static void direct_init_locked(cairn_cold_store_t *s)
{
    s->direct = 0;
#ifdef CAIRN_HAVE_URING
    if (!s->n_layers || !cairn_knob_bool("CAIRN_COLD_DIRECT", false, false, true))
        return;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const uint64_t obj = tier_object_header_size(s->block_tokens, s->n_layers) + s->payload_bytes;
    /* One byte past the object: a longer file reads more than expected. */
    const size_t cap = (size_t)((obj + 1 + page - 1) / page * page);
    uint32_t n = (uint32_t)(FS_DIRECT_BYTES / cap);
    n = n > FS_DIRECT_BUFS ? FS_DIRECT_BUFS : n < 2 ? 2 : n;
    void *mem = mmap(NULL, (size_t)n * cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return;
    struct io_uring *ring = cairn_malloc(sizeof *ring);
    if (!ring || io_uring_queue_init(2 * FS_DIRECT_BUFS, ring, 0) != 0) {
        cairn_free(ring);
        munmap(mem, (size_t)n * cap);
        return;
    }
    s->ring = ring;
    s->dmem = mem;
    s->dcap = cap;
    s->n_dbuf = n;
    s->ring_pid = getpid();
    s->direct = 1;
#endif
}

/* A FREE buffer, retiring the oldest direct entry when every buffer is in use; -1 when
 * readers hold them all. Caller holds amu. */
static int free_buf_locked(cairn_cold_store_t *s)
{
    for (;;) {
        for (uint32_t b = 0; b < s->n_dbuf; b++)
            if (s->dbuf[b].state == DBUF_FREE)
                return (int)b;
        uint32_t i = 0;
        while (i < s->n_ahead && s->ahead[i].buf < 0)
            i++;
        if (i == s->n_ahead)
            return -1;
        retire_locked(s, ahead_take_locked(s, i));
    }
}

/* Queues the direct read of fd into a buffer and keeps the entry. false: not queued (the
 * caller hints it buffered). Caller holds amu. */
static bool submit_direct_locked(cairn_cold_store_t *s, const cairn_tier_hash_t *h, int fd)
{
#ifdef CAIRN_HAVE_URING
    int b = free_buf_locked(s);
    if (b < 0)
        return false;
    if (s->n_ahead == FS_AHEAD_SLOTS)
        retire_locked(s, ahead_take_locked(s, 0));
    struct io_uring_sqe *sqe = io_uring_get_sqe(s->ring);
    if (!sqe)
        return false;
    io_uring_prep_read(sqe, fd, s->dmem + (size_t)b * s->dcap, (unsigned)s->dcap, 0);
    io_uring_sqe_set_data64(sqe, (uint64_t)b);
    s->dbuf[b].state = DBUF_INFLIGHT;
    int r;
    while ((r = io_uring_submit(s->ring)) == -EINTR)
        ;
    if (r < 1) {
        /* Nothing was queued (the sqe stays in the ring's tail: withdraw it by turning
         * direct reads off for this store). */
        s->dbuf[b].state = DBUF_FREE;
        s->direct = 0;
        return false;
    }
    s->ahead[s->n_ahead++] = (fs_ahead_t){*h, fd, b};
    return true;
#else
    (void)s;
    (void)h;
    (void)fd;
    return false;
#endif
}

void fs__prefetch(cairn_cold_store_t *s, const cairn_tier_hash_t *h)
{
    pthread_mutex_lock(&s->amu);
    bool have = ahead_find_locked(s, h) < s->n_ahead;
    if (s->direct < 0)
        direct_init_locked(s);
    bool direct = s->direct > 0 && s->ring_pid == getpid();
    pthread_mutex_unlock(&s->amu);
    if (have)
        return;
    const cairn_tier_key_t k = fs__block_key(h);
    char *path = fs__object_path(s, &k);
    if (!path)
        return;
    int fd = -1;
    if (direct) {
        fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (fd < 0 && errno == EINVAL) {
            /* The filesystem has no O_DIRECT: hints go buffered from now on. */
            pthread_mutex_lock(&s->amu);
            s->direct = 0;
            pthread_mutex_unlock(&s->amu);
            direct = false;
        }
    }
    if (!direct)
        fd = open(path, O_RDONLY | O_CLOEXEC);
    cairn_free(path);
    if (fd < 0)
        return; /* absent: the read will say so */
    pthread_mutex_lock(&s->amu);
    if (ahead_find_locked(s, h) < s->n_ahead) { /* a concurrent hint won */
        pthread_mutex_unlock(&s->amu);
        close(fd);
        return;
    }
    if (direct && s->direct > 0 && submit_direct_locked(s, h, fd)) {
        pthread_mutex_unlock(&s->amu);
        return;
    }
    pthread_mutex_unlock(&s->amu);
    if (direct) {
        /* No buffer or no ring after all: keep a buffered descriptor instead. */
        close(fd);
        const cairn_tier_key_t k2 = fs__block_key(h);
        char *p2 = fs__object_path(s, &k2);
        fd = p2 ? open(p2, O_RDONLY | O_CLOEXEC) : -1;
        cairn_free(p2);
        if (fd < 0)
            return;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    pthread_mutex_lock(&s->amu);
    if (ahead_find_locked(s, h) < s->n_ahead) {
        pthread_mutex_unlock(&s->amu);
        close(fd);
        return;
    }
    if (s->n_ahead == FS_AHEAD_SLOTS)
        retire_locked(s, ahead_take_locked(s, 0));
    s->ahead[s->n_ahead++] = (fs_ahead_t){*h, fd, -1};
    pthread_mutex_unlock(&s->amu);
}

fs_taken_t fs__take_ahead(cairn_cold_store_t *s, const cairn_tier_hash_t *h)
{
    fs_taken_t t = {-1, -1, 0, NULL};
    pthread_mutex_lock(&s->amu);
    uint32_t i = ahead_find_locked(s, h);
    if (i < s->n_ahead) {
        fs_ahead_t a = ahead_take_locked(s, i);
        t.fd = a.fd;
        t.buf = a.buf;
        if (a.buf >= 0) {
            reap_until_locked(s, a.buf);
            s->dbuf[a.buf].state = DBUF_TAKEN;
            t.res = s->dbuf[a.buf].res;
            t.bytes = s->dmem + (size_t)a.buf * s->dcap;
        }
    }
    pthread_mutex_unlock(&s->amu);
    return t;
}

void fs__give_back(cairn_cold_store_t *s, fs_taken_t *t)
{
    if (t->buf >= 0) {
        pthread_mutex_lock(&s->amu);
        s->dbuf[t->buf].state = DBUF_FREE;
        pthread_mutex_unlock(&s->amu);
    }
    if (t->fd >= 0)
        close(t->fd);
    *t = (fs_taken_t){-1, -1, 0, NULL};
}

void fs__drop_ahead(cairn_cold_store_t *s)
{
    pthread_mutex_lock(&s->amu);
    while (s->n_ahead)
        retire_locked(s, ahead_take_locked(s, s->n_ahead - 1));
#ifdef CAIRN_HAVE_URING
    if (s->ring) {
        if (s->ring_pid == getpid())
            io_uring_queue_exit(s->ring);
        cairn_free(s->ring);
        s->ring = NULL;
    }
#endif
    if (s->dmem)
        munmap(s->dmem, (size_t)s->n_dbuf * s->dcap);
    s->dmem = NULL;
    s->n_dbuf = 0;
    s->direct = -1;
    pthread_mutex_unlock(&s->amu);
}

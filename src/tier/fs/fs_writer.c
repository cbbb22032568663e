/*
 * fs_writer.c — the filesystem store's bounded write queue and its single writer thread.
 *
 * Model: producers (the engine's capture, at the end of a turn) copy an object's tokens
 * (BLOCK) or layout descriptor (STATE) and payload into a queue entry, so the pool block
 * or state may be evicted or recycled the moment enqueue returns. One writer thread takes up to `batch_max` queued entries at a time and commits
 * them as one group (commit_batch): for each, O_EXCL temp file (unique name) -> write;
 * then fdatasync each; then rename each; then fsync each distinct directory once; only
 * then are they indexed. A name appears only after its payload was synced, so a crash at
 * any point leaves every final name either absent or complete; a temp file of a dead
 * writer is removed by the next open.
 * Invariants: the queue holds at most `depth` entries of any kind plus FS_STATE_SLOTS
 * that only STATE objects take (so blocks filling the queue never crowd out a turn's
 * sidecar), and the batch being committed at most `batch_max` (host memory in flight is
 * bounded by (depth + FS_STATE_SLOTS + batch_max) x object size); an object is never
 * queued twice; an object already present is never
 * rewritten; an I/O failure is counted (write_errors) and logged, never reported to the
 * producer, and leaves no object behind.
 * Thread-safety: enqueue/flush may be called from any thread; the queue is guarded by
 * qmu, the index and counters by mu (never both at once).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef CAIRN_HAVE_URING
#include <liburing.h>
#endif

#include "tier/fs/fs_store_impl.h"

/* Temp-file sequence numbers, shared by every store of the process (see obj_write). */
static atomic_ulong tmp_seq;

static void job_free(fs_job_t *j)
{
    if (!j)
        return;
    cairn_free(j->tokens);
    cairn_free(j->layout);
    cairn_free(j->buf);
    cairn_free(j);
}

static int io_fail(const char *op, const char *path)
{
    int e = cairn_io_check(op, path);
    if (e < 0)
        errno = -e;
    return e;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) {
            errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/*
 * Issues a batch's fsyncs together. Each fsync of a new file or directory ends in a
 * device cache flush; flushes that are in flight at the same time are merged by the block
 * layer and the journal commits they wait on are shared, so N concurrent syncs cost about
 * one, where N sequential ones cost N. With liburing the syncs go through one ring (the
 * kernel runs them in parallel); without it, or when the ring cannot be set up (a kernel
 * or sandbox without io_uring), they run one after another: slower, equally durable.
 * The first ndata descriptors get fdatasync, the rest fsync; errs[i] receives 0 or the
 * errno of fds[i]'s sync.
 */
typedef struct {
#ifdef CAIRN_HAVE_URING
    struct io_uring ring;
#endif
    bool has_ring;
    unsigned entries;
} syncer_t;

static void syncer_init(syncer_t *y)
{
    memset(y, 0, sizeof *y);
#ifdef CAIRN_HAVE_URING
    y->entries = 64;
    /* Knob CAIRN_COLD_URING=0 takes the portable path (tests, or to rule the ring out). */
    if (cairn_knob_bool("CAIRN_COLD_URING", false, false, true))
        y->has_ring = io_uring_queue_init(y->entries, &y->ring, 0) == 0;
#endif
}

static void syncer_fini(syncer_t *y)
{
#ifdef CAIRN_HAVE_URING
    if (y->has_ring)
        io_uring_queue_exit(&y->ring);
#endif
    y->has_ring = false;
}

static void sync_many(syncer_t *y, const int *fds, int *errs, uint32_t n, uint32_t ndata)
{
    uint32_t i = 0;
#ifdef CAIRN_HAVE_URING
    while (y->has_ring && i < n) {
        /* The ring is drained every round, so m <= entries SQEs are always free. */
        uint32_t m = n - i < y->entries ? n - i : y->entries;
        for (uint32_t k = 0; k < m; k++) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&y->ring);
            io_uring_prep_fsync(sqe, fds[i + k], i + k < ndata ? IORING_FSYNC_DATASYNC : 0);
            io_uring_sqe_set_data64(sqe, i + k);
            errs[i + k] = EIO; /* until its completion says otherwise */
        }
        int sub = io_uring_submit(&y->ring);
        if (sub < 0)
            sub = 0;
        bool broken = (uint32_t)sub < m;
        for (int k = 0; k < sub; k++) {
            struct io_uring_cqe *cqe;
            int w;
            while ((w = io_uring_wait_cqe(&y->ring, &cqe)) == -EINTR)
                ;
            if (w < 0) {
                broken = true; /* the rest keep EIO: withdrawn, never trusted */
                break;
            }
            errs[io_uring_cqe_get_data64(cqe)] = cqe->res < 0 ? -cqe->res : 0;
            io_uring_cqe_seen(&y->ring, cqe);
        }
        if (broken) {
            /* Unsubmitted syncs (the tail of this round) and later rounds run directly. */
            syncer_fini(y);
            i += (uint32_t)sub;
            break;
        }
        i += m;
    }
#else
    (void)y;
#endif
    for (; i < n; i++)
        errs[i] = (i < ndata ? fdatasync(fds[i]) : fsync(fds[i])) < 0 ? errno : 0;
}

static void count_error(cairn_cold_store_t *s, const char *what, const char *path, int err)
{
    pthread_mutex_lock(&s->mu);
    s->c.write_errors++;
    pthread_mutex_unlock(&s->mu);
    cairn_log(CAIRN_LOG_ERROR, "cold tier: %s %s failed: %s%s", what, path, strerror(err),
              err == ENOSPC ? " (disk full)" : "");
}

/* One object of a group commit and how far it got. */
typedef enum { OBJ_SKIP, OBJ_WRITTEN, OBJ_SYNCED, OBJ_RENAMED, OBJ_DONE } obj_state_t;

typedef struct {
    fs_job_t *job;
    char *final, *shard, *tmp;
    int fd;
    size_t total;
    obj_state_t st;
    bool new_dir;    /* this object created its shard directory */
    bool lead;       /* first renamed object of its directory in the batch */
    int dir_err;     /* the lead's: why its directory could not be opened */
} obj_t;

/* Withdraws an object that failed at any step: closes it, removes what this writer
 * created (the temp name, or the final name when the rename is not known durable) and
 * counts the error. */
static void obj_fail(cairn_cold_store_t *s, obj_t *o, const char *what, int err)
{
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
    if (o->st == OBJ_RENAMED && o->final)
        unlink(o->final);
    else if (o->tmp)
        unlink(o->tmp);
    count_error(s, what, o->tmp ? o->tmp : o->final ? o->final : "object", err);
    o->st = OBJ_SKIP;
}

/* The object's directory vanished after the rename: a store sharing the directory (another
 * process, or another store of this one) cleared it, taking the object with it. Nothing of
 * the object is left to withdraw and no write failed, so it is dropped without an error
 * (it is not indexed; the next capture of the block writes it again). */
static void obj_gone(obj_t *o)
{
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
    o->st = OBJ_SKIP;
}

/* Step 1 of a commit: the temp file exists (O_EXCL, unique name), holds the whole object
 * and its writeback has started. An object already on disk is indexed and skipped. */
static void obj_write(cairn_cold_store_t *s, obj_t *o)
{
    fs_job_t *j = o->job;
    const bool state = j->obj.key.kind == CAIRN_TIER_STATE;
    o->st = OBJ_SKIP;
    o->final = fs__object_path(s, &j->obj.key);
    o->shard = fs__shard_path(s, &j->obj.key.hash);
    if (!o->final || !o->shard) {
        obj_fail(s, o, "allocation for", ENOMEM);
        return;
    }
    struct stat st;
    if (stat(o->final, &st) == 0) {
        /* Already present (another process, or a duplicate that raced the index check):
         * objects are immutable, so it is not rewritten. */
        pthread_mutex_lock(&s->mu);
        if (fs__insert_locked(s, &j->obj.key, &j->obj.parent, (uint64_t)st.st_size, j->obj.n_tokens,
                              state ? j->obj.boundary : 0) == CAIRN_OK)
            fs__evict_locked(s, s->quota, fs__find_locked(s, &j->obj.key)); /* as a commit does */
        pthread_mutex_unlock(&s->mu);
        return;
    }
    size_t hb = 0;
    int erc = state ? tier_state_encode_header(j->buf, j->header_cap, &s->fp, &j->obj, &hb)
                    : tier_object_encode_header(j->buf, j->header_cap, &s->fp, s->dtype, s->n_layers, s->layer_bytes,
                                                &j->obj, &hb);
    if (erc || hb != j->header_cap) {
        obj_fail(s, o, "encoding", EINVAL);
        return;
    }
    char hex[65];
    cairn_tier_hash_hex(&j->obj.key.hash, hex);
    size_t tn = strlen(o->shard) + 64 + 64;
    if (!(o->tmp = cairn_malloc(tn))) {
        obj_fail(s, o, "allocation for", ENOMEM);
        return;
    }
    /* Unique in the process, not only in this store: two stores of one process may share
     * a directory (two engines of one model), and O_EXCL refuses the second of two equal
     * names. */
    snprintf(o->tmp, tn, "%s/.tmp.%s.%ld.%lu", o->shard, hex, (long)getpid(),
             (unsigned long)atomic_fetch_add(&tmp_seq, 1));
    /* A new shard directory is made durable in its parent (with the batch's payloads)
     * before anything is renamed into it. A clear or prune (of any process sharing the
     * directory) removes shard directories it empties, so one may vanish between the
     * mkdir and the create: then it is made again (bounded; each round needs a rival to
     * empty it once more). */
    int err = 0;
    const char *what = "creating";
    for (int attempt = 0; attempt < 8; attempt++) {
        what = "creating directory";
        if (io_fail("mkdir", o->shard) < 0) {
            err = errno;
            break;
        }
        if (mkdir(o->shard, 0700) == 0)
            o->new_dir = true;
        else if (errno != EEXIST) {
            err = errno;
            break;
        }
        err = 0;
        what = "creating";
        if (io_fail("open", o->tmp) < 0 || (o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
            err = errno;
        if (err != ENOENT)
            break;
    }
    if (err) {
        cairn_free(o->tmp);
        o->tmp = NULL; /* not ours: never unlink a name we did not create */
        obj_fail(s, o, what, err);
        return;
    }
    o->total = hb + j->obj.payload_size;
    if (io_fail("write", o->tmp) < 0 || write_all(o->fd, j->buf, o->total) < 0) {
        obj_fail(s, o, "writing", errno);
        return;
    }
#ifdef SYNC_FILE_RANGE_WRITE
    /* Start the writeback now so the device works on this object while the next ones are
     * written; the fdatasync below is what makes it durable (this is only a hint). */
    (void)sync_file_range(o->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
    o->st = OBJ_WRITTEN;
}

/* Step 3: the final name appears, only for a synced payload. */
static void obj_rename(cairn_cold_store_t *s, obj_t *o)
{
    if (o->st != OBJ_SYNCED)
        return;
    if (io_fail("rename", o->final) < 0 || rename(o->tmp, o->final) < 0) {
        obj_fail(s, o, "renaming", errno);
        return;
    }
    o->st = OBJ_RENAMED;
}

/*
 * Commits a batch of jobs as one group commit:
 *   1. each object: temp file (O_EXCL) <- whole object, writeback started;
 *   2. each object: fdatasync (the device works on all of them from step 1 on);
 *   3. each synced object: rename to its final name;
 *   4. each distinct directory that got a rename: one fsync;
 *   5. each object whose directory fsync succeeded: indexed.
 * A name becomes visible only after its payload was synced (2 before 3), so a crash at any
 * point leaves complete objects or temp files; an object whose directory fsync failed is
 * withdrawn (its rename may not survive). Failures are per object: the others commit.
 */
static void commit_batch(cairn_cold_store_t *s, fs_job_t **jobs, uint32_t n, obj_t *objs, syncer_t *y,
                         int *fds, int *errs)
{
    for (uint32_t i = 0; i < n; i++) {
        objs[i] = (obj_t){.job = jobs[i], .fd = -1};
        obj_write(s, &objs[i]);
    }
    /* Payloads: fdatasync (it covers the size a reader needs), all of them at once, and
     * with them the store directory when the batch created shard directories in it. */
    uint32_t m = 0;
    bool new_dirs = false;
    for (uint32_t i = 0; i < n; i++) /* a failed object's new directory may serve others */
        new_dirs |= objs[i].new_dir;
    for (uint32_t i = 0; i < n; i++) {
        obj_t *o = &objs[i];
        if (o->st != OBJ_WRITTEN)
            continue;
        if (io_fail("fsync", o->tmp) < 0)
            obj_fail(s, o, "syncing", errno);
        else
            fds[m++] = o->fd;
    }
    int top = -1, top_err = 0;
    if (new_dirs) {
        if (io_fail("fsync", s->dir) < 0 || (top = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
            top_err = errno ? errno : EIO;
        else
            fds[m] = top;
    }
    sync_many(y, fds, errs, m + (top >= 0), m);
    if (top >= 0) {
        top_err = errs[m];
        close(top);
    }
    for (uint32_t i = 0, k = 0; i < n; i++) {
        obj_t *o = &objs[i];
        if (o->st != OBJ_WRITTEN)
            continue;
        int err = errs[k++];
        /* A directory this batch created whose entry is not known durable takes every
         * object of the batch that would be renamed into it. */
        bool fresh = false;
        for (uint32_t j = 0; j < n && top_err && !fresh; j++)
            fresh = objs[j].new_dir && !strcmp(objs[j].shard, o->shard);
        if (err || fresh) {
            obj_fail(s, o, fresh ? "creating directory" : "syncing", err ? err : top_err);
            continue;
        }
        close(o->fd);
        o->fd = -1;
        o->st = OBJ_SYNCED;
    }
    for (uint32_t i = 0; i < n && top_err; i++)
        if (objs[i].new_dir)
            rmdir(objs[i].shard); /* not known durable, now empty: the next object makes it again */
    for (uint32_t i = 0; i < n; i++)
        obj_rename(s, &objs[i]);
    /* Directories: one fsync each for every object of the batch renamed into it. The first
     * renamed object of a directory leads it and holds its descriptor. */
    m = 0;
    for (uint32_t i = 0; i < n; i++) {
        obj_t *o = &objs[i];
        if (o->st != OBJ_RENAMED)
            continue;
        o->lead = true;
        for (uint32_t k = 0; k < i && o->lead; k++)
            o->lead = objs[k].st != OBJ_RENAMED || strcmp(objs[k].shard, o->shard);
        if (!o->lead)
            continue;
        o->dir_err = 0;
        if (io_fail("fsync", o->shard) < 0 || (o->fd = open(o->shard, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
            o->dir_err = errno ? errno : EIO;
        else
            fds[m++] = o->fd;
    }
    sync_many(y, fds, errs, m, 0);
    for (uint32_t i = 0, k = 0; i < n; i++) {
        obj_t *o = &objs[i];
        if (!o->lead)
            continue;
        int err = o->fd >= 0 ? errs[k++] : o->dir_err;
        if (o->fd >= 0)
            close(o->fd);
        o->fd = -1;
        for (uint32_t j = n; j-- > i;) { /* the lead last: it names the directory */
            obj_t *q = &objs[j];
            if (q->st != OBJ_RENAMED || strcmp(q->shard, o->shard))
                continue;
            if (err == ENOENT)
                obj_gone(q);
            else if (err)
                obj_fail(s, q, "syncing directory of", err);
            else
                q->st = OBJ_DONE;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        obj_t *o = &objs[i];
        if (o->st == OBJ_DONE) {
            const cairn_tier_object_t *b = &o->job->obj;
            pthread_mutex_lock(&s->mu);
            s->c.bytes_written += o->total;
            if (fs__insert_locked(s, &b->key, &b->parent, o->total, b->n_tokens,
                                  b->key.kind == CAIRN_TIER_STATE ? b->boundary : 0) == CAIRN_OK)
                fs__evict_locked(s, s->quota, fs__find_locked(s, &b->key));
            pthread_mutex_unlock(&s->mu);
        }
        cairn_free(o->tmp);
        cairn_free(o->final);
        cairn_free(o->shard);
    }
}

static void *writer_main(void *arg)
{
    cairn_cold_store_t *s = arg;
    obj_t *objs = cairn_calloc(s->batch_max, sizeof *objs);
    /* One descriptor per object plus the store directory. */
    int *fds = cairn_calloc(s->batch_max + 1, sizeof *fds), *errs = cairn_calloc(s->batch_max + 1, sizeof *errs);
    uint32_t max = objs && fds && errs ? s->batch_max : 1;
    obj_t one;
    int one_fd[2], one_err[2];
    if (max == 1) { /* out of memory at start: commit one object at a time */
        cairn_free(objs);
        cairn_free(fds);
        cairn_free(errs);
        objs = &one;
        fds = one_fd;
        errs = one_err;
    }
    syncer_t y;
    syncer_init(&y);
    pthread_mutex_lock(&s->qmu);
    for (;;) {
        while (!s->qlen && !s->stop)
            pthread_cond_wait(&s->q_not_empty, &s->qmu);
        if (!s->qlen)
            break;
        /* Take everything queued (up to the batch size): the slots free at once, so the
         * producer keeps filling the queue while this batch is committed. */
        uint32_t n = 0;
        while (s->qlen && n < max) {
            s->batch[n++] = s->queue[s->qhead];
            s->queue[s->qhead] = NULL;
            s->qhead = (s->qhead + 1) % s->qcap;
            s->qlen--;
        }
        s->batch_len = n;
        pthread_cond_broadcast(&s->q_not_full);
        pthread_mutex_unlock(&s->qmu);
        commit_batch(s, s->batch, n, objs, &y, fds, errs);
        pthread_mutex_lock(&s->qmu);
        for (uint32_t i = 0; i < n; i++) {
            job_free(s->batch[i]);
            s->batch[i] = NULL;
        }
        s->batch_len = 0;
        if (!s->qlen)
            pthread_cond_broadcast(&s->q_idle);
    }
    pthread_cond_broadcast(&s->q_idle);
    pthread_mutex_unlock(&s->qmu);
    syncer_fini(&y);
    if (objs != &one) {
        cairn_free(objs);
        cairn_free(fds);
        cairn_free(errs);
    }
    return NULL;
}

int fs__writer_start(cairn_cold_store_t *s)
{
    if (pthread_create(&s->thread, NULL, writer_main, s))
        return CAIRN_ENOMEM;
    s->has_thread = true;
    return CAIRN_OK;
}

void fs__writer_stop(cairn_cold_store_t *s)
{
    if (!s->has_thread)
        return;
    pthread_mutex_lock(&s->qmu);
    s->stop = true;
    pthread_cond_broadcast(&s->q_not_empty);
    pthread_mutex_unlock(&s->qmu);
    pthread_join(s->thread, NULL);
    s->has_thread = false;
}

void cairn_cold_store_flush(cairn_cold_store_t *s)
{
    pthread_mutex_lock(&s->qmu);
    while (s->has_thread && (s->qlen || s->batch_len))
        pthread_cond_wait(&s->q_idle, &s->qmu);
    pthread_mutex_unlock(&s->qmu);
}

/* Whether two keys name the same stored object (the domain is not part of the name). */
static bool same_object(const cairn_tier_key_t *a, const cairn_tier_key_t *b)
{
    return a->kind == b->kind && (a->kind != CAIRN_TIER_STATE || a->group == b->group) &&
           !memcmp(a->hash.bytes, b->hash.bytes, 32);
}

bool fs__writer_pending(cairn_cold_store_t *s, const cairn_tier_key_t *k)
{
    for (uint32_t i = 0; i < s->batch_len; i++)
        if (same_object(&s->batch[i]->obj.key, k))
            return true;
    for (uint32_t i = 0; i < s->qlen; i++) {
        fs_job_t *j = s->queue[(s->qhead + i) % s->qcap];
        if (same_object(&j->obj.key, k))
            return true;
    }
    return false;
}

bool fs__pending(cairn_cold_store_t *s, const cairn_tier_key_t *k)
{
    pthread_mutex_lock(&s->qmu);
    bool r = fs__writer_pending(s, k);
    pthread_mutex_unlock(&s->qmu);
    return r;
}

static fs_job_t *job_copy(const cairn_cold_store_t *s, const cairn_tier_object_t *b)
{
    const bool state = b->key.kind == CAIRN_TIER_STATE;
    fs_job_t *j = cairn_calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->header_cap = state ? tier_state_header_size(b->layout_size) : tier_object_header_size(b->n_tokens, s->n_layers);
    j->buf = cairn_malloc(j->header_cap + b->payload_size);
    if (state)
        j->layout = cairn_malloc(b->layout_size ? b->layout_size : 1);
    else
        j->tokens = cairn_malloc(b->n_tokens * sizeof *j->tokens);
    if (!j->buf || (state ? !j->layout : !j->tokens)) {
        job_free(j);
        return NULL;
    }
    j->obj = *b;
    if (state) {
        if (b->layout_size)
            memcpy(j->layout, b->layout, b->layout_size);
        j->obj.layout = j->layout;
        j->obj.tokens = NULL;
        j->obj.n_tokens = 0;
        memset(j->obj.parent.bytes, 0, sizeof j->obj.parent.bytes);
    } else {
        memcpy(j->tokens, b->tokens, b->n_tokens * sizeof *j->tokens);
        j->obj.tokens = j->tokens;
        j->obj.layout = NULL;
        j->obj.layout_size = 0;
    }
    if (b->payload_size)
        memcpy(j->buf + j->header_cap, b->payload, b->payload_size);
    j->obj.payload = j->buf + j->header_cap;
    return j;
}

int cairn_cold_store_enqueue(cairn_cold_store_t *s, const cairn_cold_block_t *b, uint32_t wait_ms, bool *queued)
{
    if (queued)
        *queued = false;
    if (!s || !b)
        return CAIRN_EINVAL;
    cairn_tier_object_t obj = {
        .key = {.kind = CAIRN_TIER_BLOCK, .hash = b->hash},
        .parent = b->parent,
        .tokens = b->tokens,
        .n_tokens = b->n_tokens,
        .payload = b->payload,
        .payload_size = b->payload_size,
    };
    return fs__enqueue(s, &obj, wait_ms, queued);
}

/* Whether an object may be queued: a BLOCK must match the store's layout; a STATE only
 * its own limits (the reader checks its layout descriptor). */
static bool acceptable(const cairn_cold_store_t *s, const cairn_tier_object_t *b)
{
    if (b->key.kind == CAIRN_TIER_STATE)
        return b->boundary > 0 && b->layout_size <= TIER_STATE_MAX_LAYOUT && (!b->layout_size || b->layout) &&
               (!b->payload_size || b->payload) && (uint64_t)b->payload_size <= TIER_OBJECT_MAX_PAYLOAD;
    return b->key.kind == CAIRN_TIER_BLOCK && s->n_layers && b->n_tokens == s->block_tokens && b->tokens &&
           b->payload && b->payload_size == s->payload_bytes;
}

int fs__enqueue(cairn_cold_store_t *s, const cairn_tier_object_t *b, uint32_t wait_ms, bool *queued)
{
    if (queued)
        *queued = false;
    if (!s->has_thread || !acceptable(s, b))
        return CAIRN_EINVAL;
    bool held;
    pthread_mutex_lock(&s->mu);
    held = fs__find_locked(s, &b->key) != NULL;
    pthread_mutex_unlock(&s->mu);
    if (held || fs__pending(s, &b->key))
        return CAIRN_OK;
    fs_job_t *j = job_copy(s, b);
    if (!j)
        return CAIRN_ENOMEM;
    /* A STATE may also take the slots reserved for sidecars. */
    const uint32_t room = b->key.kind == CAIRN_TIER_STATE ? s->qcap : s->depth;
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += wait_ms / 1000;
    dl.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->qmu);
    int rc = CAIRN_OK;
    for (;;) {
        if (fs__writer_pending(s, &b->key)) {
            pthread_mutex_unlock(&s->qmu);
            job_free(j);
            return CAIRN_OK;
        }
        if (s->qlen < room)
            break;
        if (!wait_ms || pthread_cond_timedwait(&s->q_not_full, &s->qmu, &dl) == ETIMEDOUT) {
            if (s->qlen < room)
                break;
            rc = CAIRN_EEXHAUSTED;
            break;
        }
    }
    if (rc == CAIRN_OK) {
        s->queue[(s->qhead + s->qlen) % s->qcap] = j;
        s->qlen++;
        pthread_cond_signal(&s->q_not_empty);
    }
    pthread_mutex_unlock(&s->qmu);
    pthread_mutex_lock(&s->mu);
    if (rc == CAIRN_OK)
        s->c.enqueued++;
    else
        s->c.queue_drops++;
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        job_free(j);
        return rc;
    }
    if (queued)
        *queued = true;
    return CAIRN_OK;
}

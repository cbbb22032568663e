/*
 * cold_files.c — page-cache drops and raw reads of a cache directory's files for the
 * cold-tier benches (cold_files.h).
 * Model: a recursive walk of the directory, every regular file; dot names are skipped.
 * Thread-safety: none (main thread of a bench).
 */
#include "cold_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double cf_now(void) { return clock_s(CLOCK_MONOTONIC); }
double cf_cpu_now(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }
double cf_thread_cpu_now(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }

#define RAW_BUF (4u << 20) /* one read() of a whole object file, aligned for O_DIRECT */

/* Calls fn on every regular file under dir; returns the sum of what fn returns. */
static uint64_t walk(const char *dir, uint64_t (*fn)(const char *path, void *user), void *user)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint64_t total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (stat(p, &sb) != 0)
            continue;
        total += S_ISDIR(sb.st_mode) ? walk(p, fn, user) : S_ISREG(sb.st_mode) ? fn(p, user) : 0;
    }
    closedir(d);
    return total;
}

static uint64_t drop_one(const char *path, void *user)
{
    (void)user;
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    return 0;
}

bool cf_drop(const char *dir)
{
    sync();
    bool all = false;
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (f) {
        all = fputs("3\n", f) >= 0;
        all = fclose(f) == 0 && all;
    }
    walk(dir, drop_one, NULL);
    return all;
}

typedef struct {
    uint8_t *buf;
    bool direct;
} read_ctx_t;

static uint64_t read_one(const char *path, void *user)
{
    read_ctx_t *r = user;
    int fd = open(path, O_RDONLY | (r->direct ? O_DIRECT : 0));
    if (fd < 0)
        return 0;
    /* O_DIRECT: ask for the file's size rounded up to pages, not the whole buffer (a
     * request past the end makes the kernel zero the rest of the buffer). */
    struct stat st;
    size_t want = RAW_BUF;
    if (r->direct && fstat(fd, &st) == 0 && (uint64_t)st.st_size < RAW_BUF)
        want = ((size_t)st.st_size + 4095) / 4096 * 4096;
    uint64_t total = 0;
    ssize_t n;
    while ((n = read(fd, r->buf, want ? want : 4096)) > 0)
        total += (uint64_t)n;
    close(fd);
    return total;
}

uint64_t cf_read(const char *dir, bool direct, double *seconds)
{
    *seconds = 0;
    void *buf = mmap(NULL, RAW_BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (buf == MAP_FAILED)
        return 0;
    read_ctx_t r = {buf, direct};
    double t0 = cf_now();
    uint64_t total = walk(dir, read_one, &r);
    *seconds = cf_now() - t0;
    munmap(buf, RAW_BUF);
    return total;
}

double cf_fresh_memory_cpu(uint64_t bytes)
{
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    (void)madvise(p, (size_t)bytes, MADV_HUGEPAGE);
    double c0 = cf_thread_cpu_now();
#ifdef MADV_POPULATE_WRITE
    (void)madvise(p, (size_t)bytes, MADV_POPULATE_WRITE);
#else
    for (uint64_t i = 0; i < bytes; i += 4096)
        ((volatile char *)p)[i] = 0;
#endif
    double c = cf_thread_cpu_now() - c0;
    munmap(p, (size_t)bytes);
    return c;
}

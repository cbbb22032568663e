/*
 * cold_files.h — what the cold-tier benches do to a cache directory's object files
 * besides restoring them: drop them from the page cache and read them raw, so a restore's
 * bandwidth is compared with the disk's on the same bytes in the same run; and the
 * clocks they time with. Shared by bench_cold_restore, bench_conv_persist and
 * bench_restore_stall (bench/CMakeLists.txt links it into each).
 * Thread-safety: none needed (each bench calls it from its main thread).
 */
#ifndef CAIRN_BENCH_COLD_FILES_H
#define CAIRN_BENCH_COLD_FILES_H

#include <stdbool.h>
#include <stdint.h>

/* Monotonic wall clock, the process's CPU time and the calling thread's, in seconds. */
double cf_now(void);
double cf_cpu_now(void);
double cf_thread_cpu_now(void);

/* Drops every file under dir from the page cache: POSIX_FADV_DONTNEED on each, and, where
 * the process may (root, /proc/sys/vm/drop_caches writable), sync + drop_caches 3 first.
 * Returns whether drop_caches was written (the bench prints which one held). */
bool cf_drop(const char *dir);

/* Reads every file under dir once, whole, in directory order: with read() through the page
 * cache (direct false; drop it first), or with O_DIRECT into an aligned buffer (the page
 * cache is not involved: what the restore's direct reads get from the device). Returns
 * the bytes read; *seconds the wall time. 0 when nothing could be read. */
uint64_t cf_read(const char *dir, bool direct, double *seconds);

/* Maps `bytes` of new anonymous memory (transparent huge pages, as the KV pool's), fills it
 * in one MADV_POPULATE_WRITE and unmaps it; returns the CPU seconds the fill took. What a
 * restore pays to materialise that many bytes of fresh pool memory before a byte is read
 * (on a VM whose host reclaims freed guest memory, most of it is the host's first touch).
 * -1 when the memory cannot be mapped. */
double cf_fresh_memory_cpu(uint64_t bytes);

#endif

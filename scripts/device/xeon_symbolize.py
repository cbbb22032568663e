#!/usr/bin/env python3
"""Per-function profile from xeon_sampler.c's output (issue 12 device runs).

usage: xeon_symbolize.py SAMPLES [BINARY_DIR ...]

SAMPLES holds "path file-offset count" lines. Each path's file (or the file of that name in
a BINARY_DIR, for samples taken on another machine) is read with binutils (readelf for the
loadable segments, nm for the function symbols, static ones included); prints the share of
samples per function, then per file."""
import bisect, collections, os, subprocess, sys

def segments(path):
    segs = []
    for l in subprocess.run(['readelf', '-lW', path], capture_output=True, text=True).stdout.splitlines():
        f = l.split()
        if f and f[0] == 'LOAD':
            segs.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))  # offset, vaddr, filesz
    return segs

def symbols(path):
    out = subprocess.run(['nm', '-n', '--defined-only', path], capture_output=True, text=True).stdout
    syms = [(int(f[0], 16), f[2]) for f in (l.split() for l in out.splitlines()) if len(f) == 3 and f[1] in 'tTwW']
    return [a for a, _ in syms], [n for _, n in syms]

def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    dirs = sys.argv[2:]
    counts = collections.Counter()
    per_file = collections.Counter()
    total = 0
    cache = {}
    for l in open(sys.argv[1]):
        if l.startswith('#'):
            print(l.strip())
            continue
        path, off, n = l.split()
        off, n = int(off, 16), int(n)
        total += n
        base = os.path.basename(path)
        per_file[base] += n
        local = next((os.path.join(d, base) for d in dirs if os.path.exists(os.path.join(d, base))), path)
        if local not in cache:
            cache[local] = (segments(local), symbols(local)) if os.path.exists(local) else None
        info = cache[local]
        name = base + ':?'
        if info:
            segs, (addrs, names) = info
            va = next((off - o + v for o, v, sz in segs if o <= off < o + sz), off)
            i = bisect.bisect_right(addrs, va) - 1
            if i >= 0:
                name = names[i]
        counts[name] += n
    print('%d samples' % total)
    for name, n in counts.most_common(45):
        print('%6.2f%%  %s' % (100.0 * n / total, name))
    print('by file:')
    for f, n in per_file.most_common(8):
        print('%6.2f%%  %s' % (100.0 * n / total, f))

main()

#!/usr/bin/env python3
"""
peer_noise_floor.py - how far llama.cpp's logits of a GGUF file move when one float32
tensor of it moves by one ulp: the noise floor of comparing two engines' logits on that
file, where float rounding of equal size (a different summation order, exp, RoPE angle)
meets the 8-bit rounding of the activations that quantized products use.
Python standard library only; needs llama.cpp (peer-dump-logits) and ../shared/peer/gguf_ref.py.

  python3 tests/models/gguf/peer_noise_floor.py FILE.gguf PROMPTS.json OUT_DIR
      [--tensor blk.0.attn_norm.weight] [--llama /tmp/llama.cpp] [--peer ../shared/peer]

Writes OUT_DIR/<stem>-ulp.gguf (every float of TENSOR, which must be float32, moved up by
one ulp: about 1e-7 relative, like one rounding step), runs gguf_ref.py on FILE and on it
(llama.cpp, CPU, f32 K/V, flash attention off, 2 threads) and prints per case the max
|logit difference| at the reference positions. PROMPTS.json: a fixture reference.json or
make_hybrid_gguf.py's prompts.json (ids must be inside the file's vocabulary).
docs/PERFORMANCE.md ("GGUF of the hybrid families") lists the figures for the hybrid files.
"""
import argparse
import array
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def perturb(src, dst, want):
    """Copies src to dst with every float32 of tensor `want` moved up by one ulp."""
    b = bytearray(open(src, "rb").read())
    pos = [0]

    def rd(fmt):
        v = struct.unpack_from("<" + fmt, b, pos[0])
        pos[0] += struct.calcsize("<" + fmt)
        return v

    def rstr():
        n, = rd("Q")
        s = bytes(b[pos[0]:pos[0] + n])
        pos[0] += n
        return s

    def skip(t):
        if t == 8:
            rstr()
        elif t == 9:
            et, n = rd("IQ")
            for _ in range(n):
                skip(et)
        else:
            pos[0] += struct.calcsize(SCALAR[t])

    _, _, n_tensors, n_kv = rd("IIQQ")
    align = 32
    for _ in range(n_kv):
        k = rstr()
        t, = rd("I")
        at = pos[0]
        skip(t)
        if k == b"general.alignment":
            align = struct.unpack_from("<I", b, at)[0]
    found = None
    for _ in range(n_tensors):
        name = rstr()
        nd, = rd("I")
        ne = rd("Q" * nd)
        t, off = rd("IQ")
        if name == want.encode():
            found = (ne, t, off)
    if not found:
        sys.exit("no tensor %s in %s" % (want, src))
    ne, t, off = found
    if t != 0:
        sys.exit("tensor %s is not float32" % want)
    count = 1
    for e in ne:
        count *= e
    base = (pos[0] + align - 1) // align * align + off
    for i in range(count):
        u, = struct.unpack_from("<I", b, base + 4 * i)
        struct.pack_into("<I", b, base + 4 * i, u + 1)
    open(dst, "wb").write(b)


def logits(d, stem, case):
    a = array.array("f")
    a.frombytes(open(os.path.join(d, "%s.%s.logits.f32" % (stem, case)), "rb").read())
    return a


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("prompts")
    ap.add_argument("out")
    ap.add_argument("--tensor", default="blk.0.attn_norm.weight")
    ap.add_argument("--llama", default="/tmp/llama.cpp")
    ap.add_argument("--peer", default=os.path.join(ROOT, "..", "shared", "peer"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.basename(a.gguf)[:-5]
    moved = os.path.join(a.out, stem + "-ulp.gguf")
    perturb(a.gguf, moved, a.tensor)
    env = dict(os.environ, LD_LIBRARY_PATH=a.llama)
    subprocess.run([sys.executable, os.path.join(a.peer, "gguf_ref.py"), os.path.join(a.llama, "peer-dump-logits"),
                    a.out, a.prompts, a.gguf, moved], check=True, env=env, stdout=subprocess.DEVNULL)
    cases = [c["name"] for c in json.load(open(a.prompts))["cases"]]
    out = []
    for c in cases:
        x, y = logits(a.out, stem, c), logits(a.out, stem + "-ulp", c)
        out.append("%s %.3g" % (c, max(abs(p - q) for p, q in zip(x, y))))
    print("%s, %s +1 ulp: max |d logit| %s" % (stem, a.tensor, ", ".join(out)))


if __name__ == "__main__":
    main()

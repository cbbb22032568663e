"""
gguf_writer.py - the GGUF v3 file layout that bench/{gemma3,lfm2,qwen35}_hf2gguf.py share:
the peer's converter loaded as a library, the general.* header keys, and the file itself
(header, key/values, tensor infos, tensors each padded to general.alignment, written to
OUT.tmp and renamed, so a failed run never leaves a half-written OUT). What differs between
the families (tensor names, hparams, per-tensor transforms) stays in each script.

The peer's hf2gguf.py (../shared/peer, see its README) supplies the encoders (kv, gstr), the
safetensors reader, dtype conversion (convert, with its rounding statistics) and the
constants (ALIGN, CHUNK, GGML_SIZE, ST_SIZE, GGUF_MAGIC, GGUF_VERSION). Python standard
library only.
"""
import os
import struct
import sys


def load_peer(path, prog):
    """The peer's hf2gguf module from folder `path`; exits naming `prog` if it is not there."""
    sys.path.insert(0, os.path.abspath(path))
    try:
        import hf2gguf  # noqa: E402  (the peer's converter, used as a library)
    except ImportError:
        sys.exit("%s: cannot import hf2gguf.py from %s (--peer)" % (prog, path))
    return hf2gguf


def general_kvs(P, arch, model_dir, ftype):
    """The general.* keys every converted file starts with (name: the model folder's name)."""
    return [
        P.kv("general.architecture", P.T_STR, arch),
        P.kv("general.name", P.T_STR, os.path.basename(os.path.normpath(model_dir))),
        P.kv("general.alignment", P.T_U32, P.ALIGN),
        P.kv("general.file_type", P.T_U32, ftype),
        P.kv("general.quantization_version", P.T_U32, 2),
    ]


def n_elements(ne):
    n = 1
    for x in ne:
        n *= x
    return n


def rows(P, st, hf, ne, t, stats):
    """Yields safetensors tensor `hf` converted to ggml type t, in chunks of whole rows of
    ne[0] elements (ne in ggml order), so a large tensor is never held whole."""
    src = st.index[hf][1]
    es = P.ST_SIZE[src]
    row = ne[0]
    n_rows = n_elements(ne) // row
    per = max(1, P.CHUNK // row)
    for r in range(0, n_rows, per):
        nr = min(per, n_rows - r)
        yield P.convert(st.read(hf, r * row * es, nr * row * es), src, t, stats)


def write(P, out, kvs, tensors):
    """Writes the GGUF file `out`. kvs: encoded key/values (P.kv). tensors: in file order,
    (gguf name, ne in ggml order, ggml type, chunks) where chunks() yields the tensor's bytes
    in that type (n_elements(ne) * GGML_SIZE[type] in all)."""
    def pad(n):
        return (n + P.ALIGN - 1) // P.ALIGN * P.ALIGN

    infos, off = [], 0
    for g, ne, t, _ in tensors:
        infos.append(P.gstr(g) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
                     + struct.pack("<IQ", t, off))
        off = pad(off + n_elements(ne) * P.GGML_SIZE[t])
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(P.GGUF_MAGIC + struct.pack("<IQQ", P.GGUF_VERSION, len(tensors), len(kvs)))
        for x in kvs + infos:
            f.write(x)
        f.write(b"\0" * (pad(f.tell()) - f.tell()))
        for g, ne, t, chunks in tensors:
            start = f.tell()
            for c in chunks():
                f.write(c)
            nbytes = f.tell() - start
            if nbytes != n_elements(ne) * P.GGML_SIZE[t]:
                sys.exit("gguf_writer: %s: wrote %d bytes, expected %d" % (g, nbytes, n_elements(ne) * P.GGML_SIZE[t]))
            f.write(b"\0" * (pad(nbytes) - nbytes))
    os.replace(tmp, out)

#!/usr/bin/env python3
"""
make_spm_gguf.py - the SentencePiece-vocabulary GGUF files of tests/tokenizer and
llama.cpp's tokenization of them (spm_llamacpp.json), for test_tokenizer_gguf.c.
Python standard library only; needs llama.cpp's peer-tok (../shared/peer/README.md).

No SentencePiece model can be downloaded here, so the vocabulary is made: a byte-pair
vocabulary learned from the fixtures' own strings (models/tokenizer and tokenizers/qwen3
reference.json, spaces escaped as U+2581 with a leading one, as SentencePiece sees text),
written the way llama.cpp's converter writes a Llama 2 / Mistral / Gemma tokenizer.model
(tokenizer.ggml.model "llama"):
  - id 0 <unk> (type 2, unknown), 1 <s> and 2 </s> (type 3, control), then the 256 byte
    tokens <0x00>..<0xFF> (type 6, score 0), as Llama 2's vocabulary starts;
  - Gemma-style control tokens <start_of_turn> / <end_of_turn>, a user-defined token
    <|tool|> (type 4) and an unused one <unused0> (type 5);
  - every character seen at least twice (score -10000 - k), then the learned pieces in
    the order they were learned, three to a score (-1, -1, -1, -2, ...) so that equal
    scores (llama.cpp takes the leftmost pair) occur; characters seen once are left out,
    so their bytes go through the byte tokens; and whitespace-run pieces like Gemma's
    ("▁▁", "▁▁▁▁", "\\n\\n") and one piece whose halves are not pieces ("xyzzy": never
    reachable by merging).
Two files: spm-llama.gguf (no add_space_prefix key: llama.cpp's default, true; bos/eos/unk
ids from its defaults) and spm-gemma.gguf (add_space_prefix false, explicit ids). Each
text of the two fixtures (in file order) and the EXTRA strings below is tokenized by
peer-tok (llama_tokenize, special tokens parsed, no BOS); the ids go to spm_llamacpp.json.

  python3 tests/tokenizer/make_spm_gguf.py [--llama /tmp/llama.cpp] [--fixtures ../shared/fixtures]
  python3 tests/tokenizer/make_spm_gguf.py --fuzz-seed fuzz/corpus/gguf/tokenizer_spm.gguf
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SP = "\u2581"

# Strings beyond the fixtures': spaces, newlines, unicode, bytes outside the vocabulary,
# special tokens in text, a piece that merging cannot reach, U+2581 typed by the user.
EXTRA = [
    "", " ", "  ", "   ", "Hello world", " Hello world", "Hello  world", "Hello world ",
    "   three leading spaces", "trailing spaces   ", "multiple    spaces   between  words",
    "\n", "\n\n", "\n\n\nnewlines\n", "line one\nline two\n\nline four", "tab\tand\r\ncrlf",
    "  \n  mixed \t whitespace \n",
    "unicode: h\u00e9llo w\u00f6rld \u00f1 \u4e2d\u6587 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4",
    "e\u0301 combining acute, \u00e9 precomposed",
    "bytes outside the vocabulary: \u2603 \u2211 \u20bf \u214b \U0001f999 \U0001d518",
    "<s>Hello</s>", "<s> space after a control token", "</s></s>", "<s>",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "text<unk>more <unk> end", "<|tool|>call(x)", "a<|tool|>b", "<unused0> is unused",
    "xyzzy", "plugh xyzzy", "<0x41> looks like a byte token",
    SP + " a typed U+2581 " + SP + SP, "ties: aaaa bbbb abab baba",
    "the the the the the the the the the the the the",
    "0123456789 3.14159 -42 1e10",
]


def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9


def kv(key, t, v, at=None):
    out = gstr(key) + struct.pack("<I", t)
    if t == T_STR:
        return out + gstr(v)
    if t == T_U32:
        return out + struct.pack("<I", v)
    if t == T_F32:
        return out + struct.pack("<f", v)
    if t == T_BOOL:
        return out + struct.pack("<B", 1 if v else 0)
    if t == T_ARR:
        out += struct.pack("<IQ", at, len(v))
        if at == T_STR:
            return out + b"".join(gstr(x) for x in v)
        fmt = {T_I32: "<i", T_F32: "<f"}[at]
        return out + b"".join(struct.pack(fmt, x) for x in v)
    raise ValueError(t)


def write_gguf(path, kvs):
    """A GGUF v3 file with metadata only (no tensors): llama.cpp loads it vocab_only."""
    body = struct.pack("<IIQQ", 0x46554747, 3, 0, len(kvs)) + b"".join(kvs)
    body += b"\0" * ((-len(body)) % 32)
    with open(path, "wb") as f:
        f.write(body)


def arch_kvs():
    """llama hyperparameters, so that llama.cpp's loader accepts the file (vocab_only)."""
    return [
        kv("general.architecture", T_STR, "llama"),
        kv("general.name", T_STR, "cairn-spm-test"),
        kv("llama.context_length", T_U32, 4096),
        kv("llama.embedding_length", T_U32, 64),
        kv("llama.block_count", T_U32, 1),
        kv("llama.feed_forward_length", T_U32, 128),
        kv("llama.attention.head_count", T_U32, 2),
        kv("llama.attention.head_count_kv", T_U32, 2),
        kv("llama.rope.dimension_count", T_U32, 32),
        kv("llama.attention.layer_norm_rms_epsilon", T_F32, 1e-5),
    ]


def learn(corpus, n_merges):
    """Byte-pair pieces over characters, most frequent pair first (ties: smallest pair)."""
    seqs = [list(s) for s in corpus if s]
    pieces = []
    for _ in range(n_merges):
        counts = {}
        for s in seqs:
            for a, b in zip(s, s[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        if counts[best] < 2:
            break
        joined = best[0] + best[1]
        pieces.append(joined)
        for k, s in enumerate(seqs):
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == best[0] and s[i + 1] == best[1]:
                    out.append(joined)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[k] = out
    return pieces


def vocabulary(corpus, n_merges):
    toks = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    toks += [("<0x%02X>" % b, 0.0, 6) for b in range(256)]
    toks += [("<start_of_turn>", 0.0, 3), ("<end_of_turn>", 0.0, 3), ("<|tool|>", 0.0, 4),
             ("<unused0>", 0.0, 5)]
    esc = [SP + s.replace(" ", SP) for s in corpus]
    freq = {}
    for s in esc:
        for c in s:
            freq[c] = freq.get(c, 0) + 1
    chars = sorted(c for c in freq if freq[c] >= 2)
    seen = set(t for t, _, _ in toks)
    for k, c in enumerate(chars):
        if c not in seen:
            toks.append((c, -10000.0 - k, 1))
            seen.add(c)
    for k, p in enumerate(learn(esc, n_merges)):
        if p not in seen and all(ch in seen for ch in p):
            toks.append((p, -1.0 - k // 3, 1))
            seen.add(p)
    for p, s in ((SP + SP, -0.5), (SP * 4, -0.25), ("\n\n", -0.5), ("xyzzy", 5.0)):
        if p not in seen:
            toks.append((p, s, 1))
            seen.add(p)
    return toks


def spm_kvs(toks, gemma):
    kvs = [
        kv("tokenizer.ggml.model", T_STR, "llama"),
        kv("tokenizer.ggml.tokens", T_ARR, [t for t, _, _ in toks], T_STR),
        kv("tokenizer.ggml.scores", T_ARR, [s for _, s, _ in toks], T_F32),
        kv("tokenizer.ggml.token_type", T_ARR, [y for _, _, y in toks], T_I32),
    ]
    if gemma:  # what convert_hf_to_gguf.py writes for Gemma: every key explicit
        kvs += [kv("tokenizer.ggml.add_space_prefix", T_BOOL, False),
                kv("tokenizer.ggml.bos_token_id", T_U32, 1),
                kv("tokenizer.ggml.eos_token_id", T_U32, 2),
                kv("tokenizer.ggml.unknown_token_id", T_U32, 0),
                kv("tokenizer.ggml.add_bos_token", T_BOOL, True),
                kv("tokenizer.ggml.add_eos_token", T_BOOL, False)]
    return kvs


def peer_tok(llama, gguf, text):
    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(text.encode("utf-8"))
    try:
        out = subprocess.run([os.path.join(llama, "peer-tok"), gguf, f.name], check=True,
                             capture_output=True, env=dict(os.environ, LD_LIBRARY_PATH=llama)).stdout
    finally:
        os.unlink(f.name)
    return [int(x) for x in out.split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", default="/tmp/llama.cpp")
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "..", "shared", "fixtures"))
    ap.add_argument("--merges", type=int, default=700)
    ap.add_argument("--fuzz-seed", help="write only a small SPM tokenizer GGUF here (no llama.cpp)")
    a = ap.parse_args()
    if a.fuzz_seed:
        toks = vocabulary(["Hello world", "hello there", "<s> a b"], 12)
        write_gguf(a.fuzz_seed, spm_kvs(toks, False))
        return
    texts = []
    for rel in ("models/tokenizer/reference.json", "tokenizers/qwen3/reference.json"):
        texts += [c["text"] for c in json.load(open(os.path.join(a.fixtures, rel)))["cases"]]
    toks = vocabulary(texts, a.merges)
    res = {"source": "llama.cpp de3ff81 peer-tok (llama_tokenize, special tokens parsed, no BOS) "
                     "on the files make_spm_gguf.py writes",
           "texts": "the cases of models/tokenizer/reference.json, then those of "
                    "tokenizers/qwen3/reference.json, in file order, then extra_texts",
           "n_tokens": len(toks), "extra_texts": EXTRA, "ids": {}}
    for name, gemma in (("spm-llama", False), ("spm-gemma", True)):
        path = os.path.join(HERE, name + ".gguf")
        write_gguf(path, arch_kvs() + spm_kvs(toks, gemma))
        res["ids"][name] = [peer_tok(a.llama, path, t) for t in texts + EXTRA]
        print("wrote", path, len(toks), "tokens")
    with open(os.path.join(HERE, "spm_llamacpp.json"), "w") as f:
        json.dump(res, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())

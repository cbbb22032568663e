#!/usr/bin/env python3
"""
make_hybrid_gguf.py - the small GGUF files of the hybrid families (gemma3, lfm2, qwen35) and
llama.cpp's reference logits for them, as committed beside this script (README.md).
Python standard library only; needs llama.cpp (llama-quantize, peer-dump-logits: the peer,
../shared/peer/README.md) and the repository's converters (bench/<family>_hf2gguf.py).

For each family it writes a seeded random HF folder (config.json + bf16 model.safetensors;
weights uniform with std 1/sqrt(fan_in), norm weights around their neutral value, so every
layer moves the logits and their RMS is about 1, like the q256 fixture's), converts it to
f32 and bf16 GGUF with the family's converter (llama.cpp's tensor names and
transformations), quantizes the f32 file with llama-quantize to each requested type, and
runs ../shared/peer/gguf_ref.py over the prompts (the fixtures' three cases, token ids
modulo the vocabulary) to write <family>-<type>.ref.json and its logits (.xz). The files
carry `cairn synth`'s byte-level BPE tokenizer for the vocabulary (llama.cpp's gpt2 model,
pre-tokenizer qwen2) and its ChatML template, so `cairn generate` and `serve` run them.

  python3 tests/models/gguf/make_hybrid_gguf.py OUT_DIR [--shape tiny|kquant]
      [--types Q8_0,Q4_0] [--llama /tmp/llama.cpp] [--peer ../shared/peer]

--shape tiny (the committed files): hidden 64, so only the 32-element block types load
(llama-quantize falls back to q5_0/q5_1 for a k-quant whose rows are not 256 wide).
--shape kquant: hidden 256 and every matrix row a multiple of 256, for Q4_K_M/Q5_K_M/Q6_K
(files too large to commit: the figures of docs/PERFORMANCE.md come from them).
--shape fuzz: hidden 8, vocab 16, f32 files with the converters' dummy vocabulary only (no
llama.cpp needed): the seeds fuzz/corpus/gguf/<family>_tiny.gguf.
"""
import argparse
import hashlib
import json
import os
import random
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

SHAPES = {
    "tiny": dict(E=64, nh=2, nkv=1, hd=32, F=128, V=320, dk=16, dv=16),
    "kquant": dict(E=256, nh=4, nkv=2, hd=64, F=512, V=512, dk=64, dv=64),
    "fuzz": dict(E=8, nh=2, nkv=1, hd=8, F=16, V=16, dk=2, dv=2),
}


def bf16(x):
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return (b + 0x7FFF + ((b >> 16) & 1)) >> 16


def rng(seed, name):
    return random.Random(int.from_bytes(hashlib.sha256(("%d:%s" % (seed, name)).encode()).digest()[:8], "little"))


def values(seed, name, shape, kind):
    n = 1
    for s in shape:
        n *= s
    r = rng(seed, name)
    if kind == "w":  # [out, in]: std 1/sqrt(in)
        a = (3.0 / shape[-1]) ** 0.5
        return [r.uniform(-a, a) for _ in range(n)]
    if kind == "zero":  # a (1 + w) norm
        return [r.uniform(-0.5, 0.5) for _ in range(n)]
    if kind == "one":  # a plain norm
        return [1.0 + r.uniform(-0.5, 0.5) for _ in range(n)]
    if kind == "conv":
        return [r.uniform(-0.6, 0.6) for _ in range(n)]
    if kind == "alog":
        return [r.uniform(-1.0, 1.5) for _ in range(n)]
    if kind == "dt":
        return [r.uniform(-1.0, 1.0) for _ in range(n)]
    raise ValueError(kind)


def write_safetensors(path, tensors, seed):
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, shape, kind in tensors:
        v = values(seed, name, shape, kind)
        blob = struct.pack("<%dH" % len(v), *map(bf16, v))
        hdr[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
    hb = json.dumps(hdr, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for b in blobs:
            f.write(b)


def gemma3(s):
    E, nh, nkv, hd, F, V = s["E"], s["nh"], s["nkv"], s["hd"], s["F"], s["V"]
    L = 6
    cfg = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": E,
           "num_hidden_layers": L, "num_attention_heads": nh, "num_key_value_heads": nkv,
           "head_dim": hd, "intermediate_size": F, "vocab_size": V, "max_position_embeddings": 2048,
           "rms_norm_eps": 1e-6, "query_pre_attn_scalar": hd, "sliding_window": 16,
           "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
           "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
           "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
           "eos_token_id": V - 1, "bos_token_id": None}
    t = [("model.embed_tokens.weight", [V, E], "w"), ("model.norm.weight", [E], "zero")]
    for i in range(L):
        p = "model.layers.%d." % i
        t += [(p + "input_layernorm.weight", [E], "zero"),
              (p + "self_attn.q_proj.weight", [nh * hd, E], "w"),
              (p + "self_attn.k_proj.weight", [nkv * hd, E], "w"),
              (p + "self_attn.v_proj.weight", [nkv * hd, E], "w"),
              (p + "self_attn.q_norm.weight", [hd], "zero"), (p + "self_attn.k_norm.weight", [hd], "zero"),
              (p + "self_attn.o_proj.weight", [E, nh * hd], "w"),
              (p + "post_attention_layernorm.weight", [E], "zero"),
              (p + "pre_feedforward_layernorm.weight", [E], "zero"),
              (p + "mlp.gate_proj.weight", [F, E], "w"), (p + "mlp.up_proj.weight", [F, E], "w"),
              (p + "mlp.down_proj.weight", [E, F], "w"),
              (p + "post_feedforward_layernorm.weight", [E], "zero")]
    return cfg, t


def lfm2(s):
    E, nh, nkv, F, V = s["E"], s["nh"], s["nkv"], s["F"], s["V"]
    hd = E // nh  # LFM2's head_dim
    kinds = ["conv", "full_attention", "conv"]
    cfg = {"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": E,
           "num_hidden_layers": len(kinds), "num_attention_heads": nh, "num_key_value_heads": nkv,
           "intermediate_size": F, "block_auto_adjust_ff_dim": False, "vocab_size": V,
           "max_position_embeddings": 2048, "norm_eps": 1e-5, "conv_L_cache": 3, "conv_bias": False,
           "layer_types": kinds, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
           "tie_word_embeddings": True, "eos_token_id": V - 1, "bos_token_id": None}
    t = [("model.embed_tokens.weight", [V, E], "w"), ("model.embedding_norm.weight", [E], "one")]
    for i, k in enumerate(kinds):
        p = "model.layers.%d." % i
        t += [(p + "operator_norm.weight", [E], "one"), (p + "ffn_norm.weight", [E], "one"),
              (p + "feed_forward.w1.weight", [F, E], "w"), (p + "feed_forward.w3.weight", [F, E], "w"),
              (p + "feed_forward.w2.weight", [E, F], "w")]
        if k == "conv":
            t += [(p + "conv.in_proj.weight", [3 * E, E], "w"), (p + "conv.conv.weight", [E, 1, 3], "conv"),
                  (p + "conv.out_proj.weight", [E, E], "w")]
        else:
            t += [(p + "self_attn.q_proj.weight", [nh * hd, E], "w"),
                  (p + "self_attn.k_proj.weight", [nkv * hd, E], "w"),
                  (p + "self_attn.v_proj.weight", [nkv * hd, E], "w"),
                  (p + "self_attn.out_proj.weight", [E, nh * hd], "w"),
                  (p + "self_attn.q_layernorm.weight", [hd], "one"),
                  (p + "self_attn.k_layernorm.weight", [hd], "one")]
    return cfg, t


def qwen35(s):
    E, nh, nkv, hd, F, V, dk, dv = s["E"], s["nh"], s["nkv"], s["hd"], s["F"], s["V"], s["dk"], s["dv"]
    Hk, Hv, K = 2, 4, 4
    kinds = ["linear_attention", "full_attention"] * 2
    cfg = {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "hidden_size": E,
           "num_hidden_layers": len(kinds), "num_attention_heads": nh, "num_key_value_heads": nkv,
           "head_dim": hd, "intermediate_size": F, "vocab_size": V, "max_position_embeddings": 2048,
           "rms_norm_eps": 1e-6, "layer_types": kinds, "full_attention_interval": 2,
           "linear_conv_kernel_dim": K, "linear_key_head_dim": dk, "linear_value_head_dim": dv,
           "linear_num_key_heads": Hk, "linear_num_value_heads": Hv, "hidden_act": "silu",
           "partial_rotary_factor": 0.25,
           "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
           "tie_word_embeddings": False, "eos_token_id": V - 1, "bos_token_id": None}
    C = 2 * Hk * dk + Hv * dv
    t = [("model.embed_tokens.weight", [V, E], "w"), ("model.norm.weight", [E], "zero"),
         ("lm_head.weight", [V, E], "w")]
    for i, k in enumerate(kinds):
        p = "model.layers.%d." % i
        t += [(p + "input_layernorm.weight", [E], "zero"), (p + "post_attention_layernorm.weight", [E], "zero"),
              (p + "mlp.gate_proj.weight", [F, E], "w"), (p + "mlp.up_proj.weight", [F, E], "w"),
              (p + "mlp.down_proj.weight", [E, F], "w")]
        if k == "linear_attention":
            q = p + "linear_attn."
            t += [(q + "in_proj_qkv.weight", [C, E], "w"), (q + "in_proj_z.weight", [Hv * dv, E], "w"),
                  (q + "in_proj_b.weight", [Hv, E], "w"), (q + "in_proj_a.weight", [Hv, E], "w"),
                  (q + "out_proj.weight", [E, Hv * dv], "w"), (q + "conv1d.weight", [C, 1, K], "conv"),
                  (q + "A_log", [Hv], "alog"), (q + "dt_bias", [Hv], "dt"), (q + "norm.weight", [dv], "one")]
        else:
            t += [(p + "self_attn.q_proj.weight", [nh * 2 * hd, E], "w"),
                  (p + "self_attn.k_proj.weight", [nkv * hd, E], "w"),
                  (p + "self_attn.v_proj.weight", [nkv * hd, E], "w"),
                  (p + "self_attn.o_proj.weight", [E, nh * hd], "w"),
                  (p + "self_attn.q_norm.weight", [hd], "zero"), (p + "self_attn.k_norm.weight", [hd], "zero")]
    return cfg, t


FAMILIES = {"gemma3": gemma3, "lfm2": lfm2, "qwen35": qwen35}


def run(cmd, env=None):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--types", default="Q8_0,Q4_0")
    ap.add_argument("--families", default="gemma3,lfm2,qwen35")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--llama", default="/tmp/llama.cpp")
    ap.add_argument("--cairn", default=os.path.join(ROOT, "build", "src", "cairn"),
                    help="writes the byte-level BPE tokenizer (cairn synth) the files carry")
    ap.add_argument("--peer", default=os.path.join(ROOT, "..", "shared", "peer"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ, LD_LIBRARY_PATH=a.llama)
    shape = SHAPES[a.shape]
    fixture = json.load(open(os.path.join(a.peer, "..", "fixtures", "models", "gemma3", "reference.json")))
    prompts = {"cases": [{"name": c["name"], "prompt_ids": [i % shape["V"] for i in c["prompt_ids"]]}
                         for c in fixture["cases"]]}
    ppath = os.path.join(a.out, "prompts.json")
    json.dump(prompts, open(ppath, "w"))
    fuzz = a.shape == "fuzz"
    tok = os.path.join(a.out, "tokenizer-hf")
    if not fuzz:
        run([a.cairn, "synth", tok, "--vocab", str(shape["V"])])
    for fam in a.families.split(","):
        cfg, tensors = FAMILIES[fam](shape)
        hf = os.path.join(a.out, fam + "-hf")
        os.makedirs(hf, exist_ok=True)
        for f in () if fuzz else ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            with open(os.path.join(tok, f), "rb") as src, open(os.path.join(hf, f), "wb") as dst:
                dst.write(src.read())
        json.dump(cfg, open(os.path.join(hf, "config.json"), "w"), indent=1)
        write_safetensors(os.path.join(hf, "model.safetensors"), tensors, a.seed)
        conv = os.path.join(ROOT, "bench", fam + "_hf2gguf.py")
        stem = os.path.join(a.out, fam)
        for t in ("f32",) if fuzz else ("f32", "bf16"):
            run([sys.executable, conv, hf, "-o", "%s-%s.gguf" % (stem, t), "--type", t, "--peer", a.peer]
                + ([] if fuzz else ["--real-vocab", "qwen2"]))
        if fuzz:
            continue
        models = ["%s-f32.gguf" % stem, "%s-bf16.gguf" % stem]
        for t in a.types.split(","):
            run([os.path.join(a.llama, "llama-quantize"), "%s-f32.gguf" % stem, "%s-%s.gguf" % (stem, t), t], env)
            models.append("%s-%s.gguf" % (stem, t))
        run([sys.executable, os.path.join(a.peer, "gguf_ref.py"), os.path.join(a.llama, "peer-dump-logits"),
             a.out, ppath] + models, env)
        print("wrote", fam)
    if not fuzz:
        run(["sh", "-c", "xz -f -9 %s/*.logits.f32" % a.out])


if __name__ == "__main__":
    main()

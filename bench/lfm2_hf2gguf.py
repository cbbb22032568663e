#!/usr/bin/env python3
"""
lfm2_hf2gguf.py - convert an LFM2 Hugging Face folder (model_type "lfm2": what `cairn synth
--preset lfm2-1.2b` writes, a fixture, or a downloaded LiquidAI checkpoint) to a GGUF v3 file
that llama.cpp loads as architecture "lfm2", with the same weights, so the two engines can
be compared on identical numbers. Python standard library only.

The peer's hf2gguf.py (../shared/peer, see its README) converts only Llama/Qwen3; this
script reuses its GGUF writer pieces (key/value encoding, safetensors reader, dtype
conversion, dummy vocab), writes the file through bench/gguf_writer.py, and adds the LFM2 layout, as llama.cpp's convert_hf_to_gguf.py
LFM2Model writes it:
  * tensors: token_embd, token_embd_norm (the final norm, HF model.embedding_norm),
    output (untied only), blk.N.{attn_norm (operator_norm), ffn_norm, ffn_gate (w1),
    ffn_up (w3), ffn_down (w2)}, attention layers blk.N.{attn_q, attn_k, attn_v,
    attn_output, attn_q_norm, attn_k_norm}, conv layers blk.N.shortconv.{in_proj,
    conv (squeezed to [hidden, L], kept f32 as ggml_ssm_conv needs), out_proj};
  * hparams: lfm2.{context_length, embedding_length, block_count, feed_forward_length
    (the Lfm2MLP width), attention.head_count, attention.head_count_kv (per layer, 0 for
    conv layers), attention.key_length / value_length, attention.layer_norm_rms_epsilon,
    rope.freq_base, rope.dimension_count, shortconv.l_cache, vocab_size}.
No rope permutation: llama.cpp runs lfm2 with NEOX rope (= HF rotate_half).

Usage: python3 bench/lfm2_hf2gguf.py HF_DIR -o OUT.gguf [--type bf16|f16|f32]
       [--peer DIR (default: ../shared/peer beside the repository)]
"""
import argparse
import json
import os
import sys

import gguf_writer


def ffn_width(cfg):
    """Lfm2MLP's feed-forward width (transformers' modelling code)."""
    ff = cfg.get("block_ff_dim", cfg["intermediate_size"])
    if cfg.get("block_auto_adjust_ff_dim", True):
        ff = int(2 * ff / 3)
        mult = cfg.get("block_ffn_dim_multiplier", 1.0)
        if mult is not None:
            m = cfg.get("block_multiple_of", 256)
            ff = int(mult * ff)
            ff = m * ((ff + m - 1) // m)
    return ff


def layer_types(cfg):
    n = cfg["num_hidden_layers"]
    if cfg.get("layer_types"):
        return list(cfg["layer_types"])
    idx = cfg.get("full_attn_idxs")
    idx = set(range(n)) if idx is None else set(idx)
    return ["full_attention" if i in idx else "conv" for i in range(n)]


LAYER = {
    "operator_norm.weight": "attn_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
    "feed_forward.w1.weight": "ffn_gate.weight", "feed_forward.w3.weight": "ffn_up.weight",
    "feed_forward.w2.weight": "ffn_down.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.out_proj.weight": "attn_output.weight",
    "self_attn.q_layernorm.weight": "attn_q_norm.weight",
    "self_attn.k_layernorm.weight": "attn_k_norm.weight",
    "conv.in_proj.weight": "shortconv.in_proj.weight", "conv.conv.weight": "shortconv.conv.weight",
    "conv.out_proj.weight": "shortconv.out_proj.weight",
}
GLOBAL = {"model.embed_tokens.weight": "token_embd.weight",
          "model.embedding_norm.weight": "token_embd_norm.weight", "lm_head.weight": "output.weight"}


def gguf_name(hf):
    if hf in GLOBAL:
        return GLOBAL[hf]
    parts = hf.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in LAYER:
        return "blk.%s.%s" % (parts[2], LAYER[parts[3]])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--type", choices=["bf16", "f16", "f32"], default="bf16")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--peer", default=os.path.join(here, "..", "..", "shared", "peer"))
    ap.add_argument("--real-vocab", metavar="PRE", help="write the folder's tokenizer.json as llama.cpp's gpt2 BPE vocab "
                    "with this pre-tokenizer name, and its chat template (the peer's hf2gguf.py option)")
    a = ap.parse_args()
    P = gguf_writer.load_peer(a.peer, "lfm2_hf2gguf")

    d = a.model_dir
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg.get("model_type") != "lfm2":
        sys.exit("lfm2_hf2gguf: model_type %r is not lfm2" % cfg.get("model_type"))
    if cfg.get("conv_bias"):
        sys.exit("lfm2_hf2gguf: conv_bias = true is not supported")
    E, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or E // nh
    ff = ffn_width(cfg)
    kinds = layer_types(cfg)
    tie = bool(cfg.get("tie_word_embeddings", cfg.get("tie_embedding", True)))
    rp = cfg.get("rope_parameters") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", cfg.get("theta", 1000000.0)))
    if (rp.get("rope_type") or "default") != "default":
        sys.exit("lfm2_hf2gguf: rope_type %r not supported" % rp.get("rope_type"))
    eps = cfg.get("norm_eps", 1e-5)
    taps = cfg.get("conv_L_cache", 3)

    st = P.SafeTensors(d)
    wtype, _, ftype = P.OUT_TYPES[a.type]
    plan = []  # (gguf name, hf name, ne in ggml order, ggml type)
    for hf in sorted(st.index):
        g = gguf_name(hf)
        if g is None:
            sys.exit("lfm2_hf2gguf: unexpected tensor %r" % hf)
        if g == "output.weight" and tie:
            continue
        shape = st.index[hf][2]
        if g.endswith("shortconv.conv.weight"):
            if len(shape) != 3 or shape[1] != 1 or shape[2] != taps:
                sys.exit("lfm2_hf2gguf: %s has shape %s" % (hf, shape))
            shape = [shape[0], shape[2]]
            t = P.GGML_F32  # ggml_ssm_conv reads an f32 kernel
        else:
            t = wtype if len(shape) == 2 else P.GGML_F32
        plan.append((g, hf, list(reversed(shape)), t))

    def order(item):
        g = item[0]
        if g.startswith("blk."):
            _, i, rest = g.split(".", 2)
            return (1, int(i), rest)
        return ({"token_embd.weight": 0, "token_embd_norm.weight": 2, "output.weight": 3}[g], 0, g)

    plan.sort(key=order)
    A = "lfm2"
    kvs = gguf_writer.general_kvs(P, A, d, ftype) + [
        P.kv(A + ".context_length", P.T_U32, cfg.get("max_position_embeddings", 128000)),
        P.kv(A + ".embedding_length", P.T_U32, E),
        P.kv(A + ".block_count", P.T_U32, L),
        P.kv(A + ".feed_forward_length", P.T_U32, ff),
        P.kv(A + ".attention.head_count", P.T_U32, nh),
        P.kv(A + ".attention.head_count_kv", P.T_ARR, [nkv if k != "conv" else 0 for k in kinds], P.T_I32),
        P.kv(A + ".attention.key_length", P.T_U32, hd),
        P.kv(A + ".attention.value_length", P.T_U32, hd),
        P.kv(A + ".attention.layer_norm_rms_epsilon", P.T_F32, eps),
        P.kv(A + ".rope.freq_base", P.T_F32, theta),
        P.kv(A + ".rope.dimension_count", P.T_U32, hd),
        P.kv(A + ".shortconv.l_cache", P.T_U32, taps),
        P.kv(A + ".vocab_size", P.T_U32, V),
    ]
    tkvs, eos, eog = (P.real_vocab_kvs(d, cfg, V, a.real_vocab) if a.real_vocab
                      else P.tokenizer_kvs(d, cfg, V))
    kvs += tkvs

    stats = {}
    gguf_writer.write(P, a.out, kvs, [(g, ne, t, lambda hf=hf, ne=ne, t=t: gguf_writer.rows(P, st, hf, ne, t, stats))
                            for g, hf, ne, t in plan])
    print("wrote %s: lfm2 type=%s layers=%d (%d attention) embd=%d heads=%d/%d head_dim=%d ff=%d "
          "vocab=%d taps=%d tied=%s tensors=%d; eos %s, end-of-generation %s"
          % (a.out, a.type, L, sum(k != "conv" for k in kinds), E, nh, nkv, hd, ff, V, taps, tie,
             len(plan), eos, eog))
    if stats.get("inexact") or stats.get("overflow"):
        print("note: f16 rounding: %s" % stats)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""
qwen35_hf2gguf.py - convert a Qwen3.5 Hugging Face folder (model_type "qwen3_5_text": what
`cairn synth --preset qwen3.5-0.8b` writes, or the qwen3_5 fixture) to a GGUF v3 file that
llama.cpp loads as architecture "qwen35", with the same weights, so the two engines can be
compared on identical numbers. Python standard library only.

The peer's hf2gguf.py (../shared/peer, see its README) converts only Llama/Qwen3; this
script reuses its GGUF writer pieces (key/value encoding, safetensors reader, dtype
conversion, dummy vocab), writes the file through bench/gguf_writer.py, and adds the Qwen3.5 layout as llama.cpp's converter writes it
(conversion/qwen.py: Qwen3NextModel, _LinearAttentionVReorderBase, Qwen3_5TextModel):
  * tensors: token_embd, output_norm, output (untied only); blk.N.{attn_norm,
    post_attention_norm, ffn_gate, ffn_up, ffn_down}; full-attention layers blk.N.{attn_q
    (q and gate rows, as HF), attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm};
    Gated DeltaNet layers blk.N.{attn_qkv (in_proj_qkv), attn_gate (in_proj_z), ssm_beta
    (in_proj_b), ssm_alpha (in_proj_a), ssm_out (out_proj), ssm_conv1d (squeezed to
    [channels, K], f32), ssm_dt.bias (dt_bias), ssm_a (= -exp(A_log)), ssm_norm};
  * every Qwen3_5RMSNorm weight (input / post-attention / final / q / k norms) is stored as
    1 + w (llama.cpp applies norms as plain w); the gated norm (linear_attn.norm) as is;
  * with fewer key than value heads, the value heads are reordered from HF's grouped order
    (the heads of key head 0, then of key head 1, ...) to llama.cpp's tiled order in every
    tensor indexed by value head (the v rows of in_proj_qkv and of conv1d, in_proj_z,
    in_proj_a/b, A_log, dt_bias, out_proj's columns), as _reorder_v_heads does;
  * hparams: qwen35.{context_length, embedding_length, block_count, feed_forward_length,
    attention.head_count, attention.head_count_kv, attention.key_length / value_length,
    attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count
    (head_dim * partial_rotary_factor), rope.dimension_sections (mrope_section, default
    [11, 11, 10, 0]; equal positions for text), ssm.conv_kernel, ssm.state_size (dk),
    ssm.group_count (key heads), ssm.time_step_rank (value heads), ssm.inner_size
    (value heads * dv), full_attention_interval, vocab_size}.
MTP tensors (mtp.*) are not written.

Usage: python3 bench/qwen35_hf2gguf.py HF_DIR -o OUT.gguf [--type bf16|f16|f32]
       [--peer DIR (default: ../shared/peer beside the repository)]
"""
import argparse
import json
import math
import os
import sys
from array import array

import gguf_writer


LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight", "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight", "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight", "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.A_log": "ssm_a",
    "linear_attn.norm.weight": "ssm_norm.weight",
}
GLOBAL = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
UNIT_OFFSET = ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight",
               "self_attn.k_norm.weight")


def text_config(cfg):
    if cfg.get("model_type") == "qwen3_5":
        return cfg["text_config"], "model.language_model."
    if cfg.get("model_type") == "qwen3_5_text":
        return cfg, "model."
    sys.exit("qwen35_hf2gguf: model_type %r is not qwen3_5_text or qwen3_5" % cfg.get("model_type"))


def gguf_name(hf, prefix):
    if hf == "lm_head.weight":
        return "output.weight", None
    if not hf.startswith(prefix):
        return None, None
    rest = hf[len(prefix):]
    if rest in GLOBAL:
        return GLOBAL[rest], rest
    parts = rest.split(".", 2)
    if len(parts) == 3 and parts[0] == "layers" and parts[2] in LAYER:
        return "blk.%s.%s" % (parts[1], LAYER[parts[2]]), parts[2]
    return None, None


def v_order(n_k, n_v):
    """HF value head index of each tiled position: tiled (j, kh) <- grouped (kh, j)."""
    r = n_v // n_k
    return [kh * r + j for j in range(r) for kh in range(n_k)]


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
    P = gguf_writer.load_peer(a.peer, "qwen35_hf2gguf")

    d = a.model_dir
    top = json.load(open(os.path.join(d, "config.json")))
    cfg, prefix = text_config(top)
    E, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", 4)
    hd = cfg.get("head_dim", 256)
    ff = cfg["intermediate_size"]
    n_k, n_v = cfg.get("linear_num_key_heads", 16), cfg.get("linear_num_value_heads", 32)
    dk, dv = cfg.get("linear_key_head_dim", 128), cfg.get("linear_value_head_dim", 128)
    K = cfg.get("linear_conv_kernel_dim", 4)
    kinds = cfg.get("layer_types") or ["full_attention" if (i + 1) % cfg.get("full_attention_interval", 4) == 0
                                       else "linear_attention" for i in range(L)]
    full = [i for i, k in enumerate(kinds) if k == "full_attention"]
    interval = full[0] + 1 if full else L + 1
    if any((k == "full_attention") != ((i + 1) % interval == 0) for i, k in enumerate(kinds)):
        sys.exit("qwen35_hf2gguf: layer_types is not a fixed full_attention_interval pattern")
    tie = bool(top.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
    rp = cfg.get("rope_parameters") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25))
    if (rp.get("rope_type") or "default") != "default":
        sys.exit("qwen35_hf2gguf: rope_type %r not supported" % rp.get("rope_type"))
    sections = list(rp.get("mrope_section") or [11, 11, 10]) + [0]
    eps = cfg.get("rms_norm_eps", 1e-6)
    order = v_order(n_k, n_v) if n_v != n_k else None

    st = P.SafeTensors(d)
    wtype, _, ftype = P.OUT_TYPES[a.type]
    plan = []  # (gguf name, hf name, role, ne in ggml order, ggml type)
    for hf in sorted(st.index):
        if hf.startswith("mtp.") or hf.startswith("model.visual."):
            continue
        g, role = gguf_name(hf, prefix)
        if g is None:
            sys.exit("qwen35_hf2gguf: unexpected tensor %r" % hf)
        if g == "output.weight" and tie:
            continue
        shape = st.index[hf][2]
        if role == "linear_attn.conv1d.weight":
            if len(shape) != 3 or shape[1] != 1 or shape[2] != K:
                sys.exit("qwen35_hf2gguf: %s has shape %s" % (hf, shape))
            shape = [shape[0], shape[2]]
        t = wtype if len(shape) == 2 and role != "linear_attn.conv1d.weight" else P.GGML_F32
        plan.append((g, hf, role, list(reversed(shape)), t))

    def key(item):
        g = item[0]
        if g.startswith("blk."):
            _, i, rest = g.split(".", 2)
            return (1, int(i), rest)
        return ({"token_embd.weight": 0, "output_norm.weight": 2, "output.weight": 3}[g], 0, g)

    plan.sort(key=key)
    A = "qwen35"
    kvs = gguf_writer.general_kvs(P, A, d, ftype) + [
        P.kv(A + ".context_length", P.T_U32, cfg.get("max_position_embeddings", 32768)),
        P.kv(A + ".embedding_length", P.T_U32, E),
        P.kv(A + ".block_count", P.T_U32, L),
        P.kv(A + ".feed_forward_length", P.T_U32, ff),
        P.kv(A + ".attention.head_count", P.T_U32, nh),
        P.kv(A + ".attention.head_count_kv", P.T_U32, nkv),
        P.kv(A + ".attention.key_length", P.T_U32, hd),
        P.kv(A + ".attention.value_length", P.T_U32, hd),
        P.kv(A + ".attention.layer_norm_rms_epsilon", P.T_F32, eps),
        P.kv(A + ".rope.freq_base", P.T_F32, theta),
        P.kv(A + ".rope.dimension_count", P.T_U32, int(hd * prf)),
        P.kv(A + ".rope.dimension_sections", P.T_ARR, sections[:4], P.T_I32),
        P.kv(A + ".ssm.conv_kernel", P.T_U32, K),
        P.kv(A + ".ssm.state_size", P.T_U32, dk),
        P.kv(A + ".ssm.group_count", P.T_U32, n_k),
        P.kv(A + ".ssm.time_step_rank", P.T_U32, n_v),
        P.kv(A + ".ssm.inner_size", P.T_U32, n_v * dv),
        P.kv(A + ".full_attention_interval", P.T_U32, interval),
        P.kv(A + ".vocab_size", P.T_U32, V),
    ]
    tkvs, eos, eog = (P.real_vocab_kvs(d, cfg if "eos_token_id" in cfg else top, V, a.real_vocab) if a.real_vocab
                      else P.tokenizer_kvs(d, cfg if "eos_token_id" in cfg else top, V))
    kvs += tkvs

    def rows_permuted(buf, es, row_len, perm_rows):
        """buf: [rows][row_len] elements of es bytes; the rows in the order perm_rows."""
        rb = row_len * es
        return b"".join(buf[r * rb:(r + 1) * rb] for r in perm_rows)

    def head_rows(order_, width, base=0):
        """Row order of `len(order_)` heads of `width` rows each, starting at row base."""
        return [base + h * width + i for h in order_ for i in range(width)]

    def transform(role, buf, src, shape):
        """Bytes of tensor `role` in the GGUF's order (still of dtype src), or f32 bytes for the
        tensors whose values change (norm offsets, -exp(A_log))."""
        es = P.ST_SIZE[src]
        if role in UNIT_OFFSET or role == "norm.weight" or role == "linear_attn.A_log":
            f = array("f", P.convert(buf, src, P.GGML_F32, {}))
            if role == "linear_attn.A_log":
                f = array("f", [-math.exp(x) for x in f])
                if order:
                    f = array("f", [f[h] for h in order])
            else:
                f = array("f", [1.0 + x for x in f])  # float32 addition, as llama.cpp's converter
            return f.tobytes(), "F32"
        if not order:
            return buf, src
        if role == "linear_attn.in_proj_qkv.weight" or role == "linear_attn.conv1d.weight":
            row_len = shape[-1]
            qk = 2 * n_k * dk
            perm = list(range(qk)) + head_rows(order, dv, qk)
            return rows_permuted(buf, es, row_len, perm), src
        if role == "linear_attn.in_proj_z.weight":
            return rows_permuted(buf, es, shape[-1], head_rows(order, dv)), src
        if role in ("linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight"):
            return rows_permuted(buf, es, shape[-1], order), src
        if role == "linear_attn.dt_bias":
            return rows_permuted(buf, es, 1, order), src
        if role == "linear_attn.out_proj.weight":
            cols = head_rows(order, dv)  # column order within each row
            rb = shape[-1] * es
            out = bytearray()
            for r in range(shape[0]):
                row = buf[r * rb:(r + 1) * rb]
                out += b"".join(row[c * es:(c + 1) * es] for c in cols)
            return bytes(out), src
        return buf, src

    stats = {}

    def transformed(hf, role, t):
        buf, s2 = transform(role, st.read(hf), st.index[hf][1], st.index[hf][2])
        yield P.convert(buf, s2, t, stats)

    def chunks(hf, role, ne, t):
        if role is not None and (role.startswith("linear_attn.") or role in UNIT_OFFSET
                                 or role == "norm.weight"):
            return lambda: transformed(hf, role, t)
        return lambda: gguf_writer.rows(P, st, hf, ne, t, stats)

    gguf_writer.write(P, a.out, kvs, [(g, ne, t, chunks(hf, role, ne, t)) for g, hf, role, ne, t in plan])
    print("wrote %s: qwen35 type=%s layers=%d (%d full, interval %d) embd=%d heads=%d/%d head_dim=%d "
          "rope_dim=%d ff=%d gdn=%d/%d x %d/%d conv=%d vocab=%d tied=%s tensors=%d%s; eos %s, "
          "end-of-generation %s"
          % (a.out, a.type, L, len(full), interval, E, nh, nkv, hd, int(hd * prf), ff, n_k, n_v, dk, dv,
             K, V, tie, len(plan), "; value heads reordered to tiled" if order else "", eos, eog))
    if stats.get("inexact") or stats.get("overflow"):
        print("note: f16 rounding: %s" % stats)


if __name__ == "__main__":
    main()

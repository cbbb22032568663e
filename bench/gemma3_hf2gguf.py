#!/usr/bin/env python3
"""
gemma3_hf2gguf.py - convert a Gemma 3 HF folder (model_type "gemma3_text", bf16/f16/f32
safetensors: what `cairn synth --arch gemma3` writes, or a downloaded text checkpoint) into
a GGUF that llama.cpp runs as LLM_ARCH_GEMMA3, so that llama.cpp and Cairn run identical
weights. Python standard library only.

The peer's converter (shared/peer/hf2gguf.py) knows Llama and Qwen3 only; this script
reuses its GGUF writer pieces (metadata encoding, dtype conversion, safetensors reader,
dummy SentencePiece vocabulary), writes the file through bench/gguf_writer.py, and adds what Gemma 3 needs, as llama.cpp's own
convert_hf_to_gguf.py Gemma3Model does:
  * tensor names: token_embd, output_norm, blk.N.{attn_norm, attn_q, attn_q_norm, attn_k,
    attn_k_norm, attn_v, attn_output, post_attention_norm, ffn_norm (HF
    pre_feedforward_layernorm), ffn_gate, ffn_up, ffn_down, post_ffw_norm}; tied embeddings
    only (llama.cpp reuses token_embd as the output);
  * every norm weight w is written as float32 (1 + w): llama.cpp multiplies by the stored
    weight, HF by 1.0 + w.float() (the same float32 values);
  * no q/k row permutation (Gemma 3 is NEOX rope in llama.cpp, rotate_half in HF);
  * gemma3.* metadata: context/embedding/feed-forward lengths, block count, head counts,
    key/value length, rms eps, rope.freq_base (the full layers'), attention.sliding_window,
    final_logit_softcapping when set.
llama.cpp fixes the rest for this architecture: every 6th layer full attention, sliding
layers' RoPE base 10000, attention scale 1/sqrt(head_dim) (27B: 1/sqrt(hidden/heads)), and
sqrt(hidden) embedding scale. The script refuses configs that differ (another layer
pattern, sliding rope base, query_pre_attn_scalar != head_dim, rope scaling on the sliding
layers, attention soft-capping), since llama.cpp would compute another model.

Usage: python3 gemma3_hf2gguf.py HF_DIR -o OUT.gguf [--type f32|f16|bf16]
       [--peer DIR] (the folder with hf2gguf.py; default ../shared/peer from the repo root)
"""
import argparse
import json
import os
import sys
from array import array

import gguf_writer


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--type", choices=["f32", "f16", "bf16"], default="bf16")
    ap.add_argument("--peer", default=os.path.join(here, "..", "..", "shared", "peer"))
    ap.add_argument("--real-vocab", metavar="PRE", help="write the folder's tokenizer.json as llama.cpp's gpt2 BPE vocab "
                    "with this pre-tokenizer name, and its chat template (the peer's hf2gguf.py option)")
    a = ap.parse_args()
    h = gguf_writer.load_peer(a.peer, "gemma3_hf2gguf")

    d = a.model_dir
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg.get("model_type") == "gemma3":
        h.die("gemma3 (multimodal) folders: convert the text model only (gemma3_text)")
    if cfg.get("model_type") != "gemma3_text":
        h.die("model_type %r is not gemma3_text" % cfg.get("model_type"))
    E, L = cfg.get("hidden_size", 2304), cfg.get("num_hidden_layers", 26)
    nh, nkv = cfg.get("num_attention_heads", 8), cfg.get("num_key_value_heads", 4)
    hd, F = cfg.get("head_dim", 256), cfg.get("intermediate_size", 9216)
    V, W = cfg.get("vocab_size", 262208), cfg.get("sliding_window", 4096)
    pattern = cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6))
    kinds = cfg.get("layer_types") or [
        "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(L)]
    if kinds != ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(L)]:
        h.die("llama.cpp's gemma3 runs every 6th layer full, the others sliding: other layer_types")
    rp = cfg.get("rope_parameters") or {}
    full = rp.get("full_attention", rp if "rope_type" in rp else {"rope_type": "default",
                                                                   "rope_theta": cfg.get("rope_theta", 1e6)})
    slid = rp.get("sliding_attention", {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq", 1e4)})
    if full.get("rope_type", "default") not in ("default", "linear"):
        h.die("rope type %r of the full layers is not converted" % full.get("rope_type"))
    if slid.get("rope_type", "default") != "default" or slid.get("rope_theta", 1e4) != 10000:
        h.die("llama.cpp's gemma3 uses rope base 10000 unscaled on the sliding layers")
    if cfg.get("query_pre_attn_scalar", 256) != hd:
        h.die("llama.cpp scales attention by 1/sqrt(head_dim): query_pre_attn_scalar must equal it")
    if cfg.get("attn_logit_softcapping") is not None:
        h.die("attention soft-capping is not in llama.cpp's gemma3")
    if not cfg.get("tie_word_embeddings", True):
        h.die("untied lm_head: llama.cpp's gemma3 reuses token_embd")

    st = h.SafeTensors(d)
    wtype, _, ftype = h.OUT_TYPES[a.type]
    names = {"model.embed_tokens.weight": ("token_embd.weight", [V, E]),
             "model.norm.weight": ("output_norm.weight", [E])}
    per_layer = {"input_layernorm": ("attn_norm", [E]), "self_attn.q_proj": ("attn_q", [nh * hd, E]),
                 "self_attn.q_norm": ("attn_q_norm", [hd]), "self_attn.k_proj": ("attn_k", [nkv * hd, E]),
                 "self_attn.k_norm": ("attn_k_norm", [hd]), "self_attn.v_proj": ("attn_v", [nkv * hd, E]),
                 "self_attn.o_proj": ("attn_output", [E, nh * hd]),
                 "post_attention_layernorm": ("post_attention_norm", [E]),
                 "pre_feedforward_layernorm": ("ffn_norm", [E]), "mlp.gate_proj": ("ffn_gate", [F, E]),
                 "mlp.up_proj": ("ffn_up", [F, E]), "mlp.down_proj": ("ffn_down", [E, F]),
                 "post_feedforward_layernorm": ("post_ffw_norm", [E])}
    for i in range(L):
        for hf, (g, shape) in per_layer.items():
            names["model.layers.%d.%s.weight" % (i, hf)] = ("blk.%d.%s.weight" % (i, g), shape)
    extra = sorted(set(st.index) - set(names) - {"lm_head.weight"})
    if extra:
        h.die("unexpected tensors: %s" % ", ".join(extra[:8]))
    for hf, (g, shape) in names.items():
        if hf not in st.index:
            h.die("missing tensor %s" % hf)
        if st.index[hf][2] != shape:
            h.die("%s: shape %s, expected %s" % (hf, st.index[hf][2], shape))

    def order(item):
        g = item[1][0]
        if g.startswith("blk."):
            return (1, int(g.split(".")[1]), g)
        return (0 if g == "token_embd.weight" else 2, 0, g)

    plan = []  # (gguf name, hf name, ne, ggml type, is_norm)
    for hf, (g, shape) in sorted(names.items(), key=order):
        is_norm = len(shape) == 1
        plan.append((g, hf, list(reversed(shape)), h.GGML_F32 if is_norm else wtype, is_norm))

    A = "gemma3"
    kvs = gguf_writer.general_kvs(P=h, arch=A, model_dir=d, ftype=ftype) + [
           h.kv(A + ".context_length", h.T_U32, cfg.get("max_position_embeddings", 131072)),
           h.kv(A + ".embedding_length", h.T_U32, E), h.kv(A + ".block_count", h.T_U32, L),
           h.kv(A + ".feed_forward_length", h.T_U32, F), h.kv(A + ".attention.head_count", h.T_U32, nh),
           h.kv(A + ".attention.head_count_kv", h.T_U32, nkv), h.kv(A + ".attention.key_length", h.T_U32, hd),
           h.kv(A + ".attention.value_length", h.T_U32, hd),
           h.kv(A + ".attention.layer_norm_rms_epsilon", h.T_F32, cfg.get("rms_norm_eps", 1e-6)),
           h.kv(A + ".rope.freq_base", h.T_F32, full.get("rope_theta", cfg.get("rope_theta", 1e6))),
           h.kv(A + ".attention.sliding_window", h.T_U32, W), h.kv(A + ".vocab_size", h.T_U32, V)]
    if full.get("rope_type") == "linear":
        kvs += [h.kv(A + ".rope.scaling.type", h.T_STR, "linear"),
                h.kv(A + ".rope.scaling.factor", h.T_F32, full["factor"])]
    if cfg.get("final_logit_softcapping") is not None:
        kvs.append(h.kv(A + ".final_logit_softcapping", h.T_F32, cfg["final_logit_softcapping"]))
    tkvs, eos, eog = (h.real_vocab_kvs(d, cfg, V, a.real_vocab) if a.real_vocab
                      else h.tokenizer_kvs(d, cfg, V))
    kvs += tkvs

    stats = {}

    def norm_plus_one(hf):  # float32 (1 + w), as HF's 1.0 + w.float()
        w = array("f")
        w.frombytes(bytes(h.convert(st.read(hf), st.index[hf][1], h.GGML_F32, stats)))
        yield array("f", [1.0 + x for x in w]).tobytes()

    gguf_writer.write(h, a.out, kvs, [(g, ne, t, (lambda hf=hf: norm_plus_one(hf)) if is_norm else
                             (lambda hf=hf, ne=ne, t=t: gguf_writer.rows(h, st, hf, ne, t, stats)))
                            for g, hf, ne, t, is_norm in plan])
    print("wrote %s: gemma3 type=%s layers=%d embd=%d heads=%d/%d head_dim=%d ff=%d vocab=%d window=%d; "
          "eos %s, llama.cpp end-of-generation %s" % (a.out, a.type, L, E, nh, nkv, hd, F, V, W, eos, eog))


if __name__ == "__main__":
    main()

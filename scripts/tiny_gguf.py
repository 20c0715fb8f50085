"""Write a small llama-architecture GGUF model with random weights and a byte-level vocabulary.

It loads in llama.cpp's ``llama-server`` and does real work per token (no hub, no download): one
byte of prompt text is one token. ``python scripts/tiny_gguf.py model.gguf [--layers 8 --width 1024]``
"""

from __future__ import annotations

import argparse

import numpy as np


def write(
    path: str, layers: int = 8, width: int = 1024, ffn: int = 2816, heads: int = 16, seed: int = 0
) -> None:
    import gguf

    rng = np.random.default_rng(seed)
    vocab = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [
        gguf.TokenType.BYTE
    ] * 256
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("simrollout-tiny")
    w.add_context_length(32768)
    w.add_embedding_length(width)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_rope_dimension_count(width // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(vocab)
    w.add_token_scores([0.0] * len(vocab))
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)

    def t(name: str, *shape: int, scale: float = 0.02) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    t("token_embd.weight", len(vocab), width)
    w.add_tensor("output_norm.weight", np.ones(width, dtype=np.float32))
    t("output.weight", len(vocab), width)
    for b in range(layers):
        w.add_tensor(f"blk.{b}.attn_norm.weight", np.ones(width, dtype=np.float32))
        w.add_tensor(f"blk.{b}.ffn_norm.weight", np.ones(width, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t(f"blk.{b}.{name}.weight", width, width)
        t(f"blk.{b}.ffn_gate.weight", ffn, width)
        t(f"blk.{b}.ffn_up.weight", ffn, width)
        t(f"blk.{b}.ffn_down.weight", width, ffn)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def ascii_only_bias() -> dict[str, int]:
    """A ``logit_bias`` that keeps the model's output to ASCII bytes (no control tokens), so every
    token streams as it comes (a server holds back the bytes of an incomplete UTF-8 sequence)."""
    return {str(t): -100 for t in [0, 1, 2] + [3 + b for b in range(128, 256)]}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?")
    ap.add_argument("--bias", action="store_true", help="print the ASCII-only logit_bias as JSON")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2816)
    a = ap.parse_args()
    if a.bias:
        import json

        print(json.dumps({"logit_bias": ascii_only_bias()}))
    else:
        write(a.path, a.layers, a.width, a.ffn)

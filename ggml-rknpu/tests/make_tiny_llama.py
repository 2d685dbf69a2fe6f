#!/usr/bin/env python3
"""Write a tiny llama-architecture GGUF model with seeded random weights.

This is the test model for the ggml-rknpu backend's end-to-end run: a model
that llama.cpp loads as an ordinary ``llama`` model (same metadata keys, same
tensor names and shapes as a converted Llama 2), small enough to build in a
second and to run on the CPU backend as a reference, yet shaped like the real
thing so that every matrix multiplication goes through the same code paths as
a real model's (attention with RoPE, SwiGLU feed-forward, RMS norms, a 32000
token output projection). No model weights need to be downloaded: the weights
are random, drawn from numpy's ``default_rng(seed)``, so the same arguments
always give a byte-identical file (with the same gguf-py and numpy).

Usage::

    python3 -m pip install gguf==0.19.0
    python3 make_tiny_llama.py \\
        --vocab LLAMA_CPP/models/ggml-vocab-llama-spm.gguf \\
        --out tiny-f16.gguf [--type f16|q8_0|q4_0|f32] [--layers 2] \\
        [--embd 256] [--ff 512] [--heads 4] [--kv-heads 4] [--ctx 512] \\
        [--seed 20261202]

    llama-simple -m tiny-f16.gguf -n 32 "Once upon a time"

The tokenizer is the Llama (SentencePiece) vocabulary that llama.cpp ships as
``models/ggml-vocab-llama-spm.gguf`` (a vocab-only GGUF): every
``tokenizer.*`` key of that file is copied over unchanged, with the same
value types, so prompts tokenize exactly as they would for Llama 2.

What the file holds:

* metadata: ``general.*`` (architecture ``llama``, name, file type) and the
  ``llama.*`` hyperparameters the llama loader reads (block count, context,
  embedding and feed-forward length, head counts, RMS-norm epsilon 1e-5,
  RoPE dimension count = n_embd / heads, RoPE base 10000, vocab size);
* tensors, in numpy's (rows = out features, cols = in features) order, which
  GGUF stores reversed, i.e. as llama.cpp's ``{n_in, n_out}``:
  ``token_embd.weight`` (vocab, n_embd); per block ``attn_norm`` (n_embd),
  ``attn_q`` (n_embd, n_embd), ``attn_k``/``attn_v`` (n_kv_heads*head_dim,
  n_embd), ``attn_output`` (n_embd, n_embd), ``ffn_norm`` (n_embd),
  ``ffn_gate``/``ffn_up`` (n_ff, n_embd), ``ffn_down`` (n_embd, n_ff);
  ``output_norm`` (n_embd) and ``output.weight`` (vocab, n_embd).

Norm weights are always F32 (as llama.cpp's converter writes them) and are
1 plus small noise. The 2-D matrices are stored in ``--type``: F16 or F32 as
is, Q8_0 or Q4_0 quantised by gguf-py's reference quantiser (which needs every
row length, n_embd and n_ff, to be a multiple of 32). ``token_embd`` and
``output`` are stored in the same type as the other matrices.

Weight scales: each matrix is standard normal times ``gain / sqrt(in)``, so
every projection of an RMS-normalised (unit-scale) input stays unit-scale and
the residual stream stays O(1) through the blocks (its RMS is about 1.3-1.6
in the default model). The query/key gain is raised so that attention is not
uniform (score spread about 2.5, so the output depends on the context), and
the output projection's gain is raised so that the logits have a standard
deviation of about 4: the distribution over the vocabulary is peaked (top
token ~8% against 0.003% for uniform) rather than flat. The greedy token
then usually wins by a margin (median about 0.2 standard deviations, ~0.8
in logits) far above F16 rounding, and the F16 and F32 files decode the same
32 tokens. The margins are still those of 32000 random logits, though: now
and then a step is a near-tie (gap under 0.01 standard deviations), which a
different accumulation order or a quantised activation can flip. A backend
is therefore best checked against the CPU backend by its logits (or by the
greedy tokens of a short run), not by long greedy texts.

Real Llama checkpoints have their q/k rows permuted by the converter to suit
ggml's RoPE layout; for random weights that permutation is meaningless, so
none is applied: only the shapes have to match what llama.cpp expects.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType, GGUFValueType, LlamaFileType

# --type -> (GGML tensor type for the 2-D matrices, general.file_type)
TYPES: dict[str, tuple[GGMLQuantizationType, LlamaFileType]] = {
    "f32": (GGMLQuantizationType.F32, LlamaFileType.ALL_F32),
    "f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (GGMLQuantizationType.Q4_0, LlamaFileType.MOSTLY_Q4_0),
}

# gain multiplying the 1/sqrt(in_features) scale of each kind of matrix
GAIN_EMBD = 1.0  # token embeddings: unit-scale residual stream from the start
GAIN_QK = 1.5  # q and k: attention scores with a spread of about gain^2
GAIN_V = 1.0
GAIN_O = 1.0
GAIN_FFN = 1.0
GAIN_OUTPUT = 4.0  # logits with a standard deviation of about 4
NORM_NOISE = 0.05  # norm weights are 1 + NORM_NOISE * N(0, 1)

RMS_EPS = 1e-5
ROPE_FREQ_BASE = 10000.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Write a tiny llama GGUF model with seeded random weights "
        "and the Llama SentencePiece tokenizer.")
    p.add_argument("--vocab", required=True,
                   help="path to llama.cpp's models/ggml-vocab-llama-spm.gguf")
    p.add_argument("--out", required=True, help="output .gguf path")
    p.add_argument("--type", choices=sorted(TYPES), default="f16",
                   help="storage type of the 2-D matrices (default f16)")
    p.add_argument("--layers", type=int, default=2, help="number of blocks (default 2)")
    p.add_argument("--embd", type=int, default=256, help="n_embd (default 256)")
    p.add_argument("--ff", type=int, default=512, help="n_ff (default 512)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--kv-heads", type=int, default=4, help="key/value heads (default 4)")
    p.add_argument("--ctx", type=int, default=512, help="context length (default 512)")
    p.add_argument("--seed", type=int, default=20261202, help="RNG seed (default 20261202)")
    p.add_argument("--name", default=None, help="general.name (default derived from the shape)")
    args = p.parse_args(argv)

    errors = []
    for field in ("layers", "embd", "ff", "heads", "kv_heads", "ctx"):
        if getattr(args, field) <= 0:
            errors.append(f"--{field.replace('_', '-')} must be positive")
    if not errors:
        if args.embd % args.heads:
            errors.append(f"--embd {args.embd} is not a multiple of --heads {args.heads}")
        elif (args.embd // args.heads) % 2:
            errors.append("head dimension (embd / heads) must be even for RoPE")
        if args.heads % args.kv_heads:
            errors.append(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
        qtype = TYPES[args.type][0]
        if qtype not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            block = gguf.GGML_QUANT_SIZES[qtype][0]
            for field in ("embd", "ff"):
                if getattr(args, field) % block:
                    errors.append(f"--{field} {getattr(args, field)} must be a multiple of "
                                  f"{block} for {args.type}")
    if errors:
        p.error("; ".join(errors))
    return args


def copy_tokenizer(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> int:
    """Copy every tokenizer.* key of the vocab file; return the vocab size."""
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            if len(field.types) != 2:
                raise SystemExit(f"{key}: nested arrays are not supported")
            sub_type = field.types[1]
            if sub_type == GGUFValueType.STRING:
                # raw bytes, not decoded text: copied exactly as stored
                value = [bytes(field.parts[i]) for i in field.data]
            else:
                value = [field.parts[i].tolist()[0] for i in field.data]
            if not value:
                continue  # GGUF cannot hold an empty array
            writer.add_key_value(key, value, GGUFValueType.ARRAY, sub_type=sub_type)
            if key == gguf.Keys.Tokenizer.LIST:
                n_vocab = len(value)
        elif vtype == GGUFValueType.STRING:
            writer.add_key_value(key, bytes(field.parts[-1]), vtype)
        else:
            writer.add_key_value(key, field.parts[-1].tolist()[0], vtype)
    if n_vocab == 0:
        raise SystemExit(f"no {gguf.Keys.Tokenizer.LIST} array in the vocab file")
    return n_vocab


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    qtype, ftype = TYPES[args.type]

    n_embd, n_ff, n_layer = args.embd, args.ff, args.layers
    n_head, n_head_kv = args.heads, args.kv_heads
    head_dim = n_embd // n_head
    n_embd_kv = n_head_kv * head_dim

    reader = gguf.GGUFReader(args.vocab)
    name = args.name or f"tiny-llama-{n_layer}L-{n_embd}d-{args.type}"

    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    writer = gguf.GGUFWriter(args.out, "llama")  # writes general.architecture

    writer.add_name(name)
    writer.add_file_type(int(ftype))
    writer.add_block_count(n_layer)
    writer.add_context_length(args.ctx)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    n_vocab = copy_tokenizer(reader, writer)
    writer.add_vocab_size(n_vocab)

    rng = np.random.default_rng(args.seed)
    n_params = 0

    def matrix(tname: str, n_out: int, n_in: int, gain: float) -> None:
        nonlocal n_params
        w = rng.standard_normal((n_out, n_in), dtype=np.float32)
        w *= np.float32(gain / math.sqrt(n_in))
        n_params += w.size
        if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            writer.add_tensor(tname, gguf.quants.quantize(w, qtype))
        else:
            # uint8 blocks; the writer turns the byte shape back into (n_out, n_in)
            writer.add_tensor(tname, gguf.quants.quantize(w, qtype), raw_dtype=qtype)

    def norm(tname: str) -> None:
        nonlocal n_params
        w = 1.0 + NORM_NOISE * rng.standard_normal(n_embd, dtype=np.float32)
        n_params += w.size
        writer.add_tensor(tname, w.astype(np.float32))

    # token_embd is looked up, not multiplied: its rows are the residual
    # stream's starting vectors, so they get unit scale rather than 1/sqrt(in)
    matrix("token_embd.weight", n_vocab, n_embd, GAIN_EMBD * math.sqrt(n_embd))
    for i in range(n_layer):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", n_embd, n_embd, GAIN_QK)
        matrix(f"blk.{i}.attn_k.weight", n_embd_kv, n_embd, GAIN_QK)
        matrix(f"blk.{i}.attn_v.weight", n_embd_kv, n_embd, GAIN_V)
        matrix(f"blk.{i}.attn_output.weight", n_embd, n_embd, GAIN_O)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", n_ff, n_embd, GAIN_FFN)
        matrix(f"blk.{i}.ffn_up.weight", n_ff, n_embd, GAIN_FFN)
        matrix(f"blk.{i}.ffn_down.weight", n_embd, n_ff, GAIN_FFN)
    norm("output_norm.weight")
    matrix("output.weight", n_vocab, n_embd, GAIN_OUTPUT)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    size = os.path.getsize(args.out)
    print(f"{args.out}: {args.type}, {n_params} parameters "
          f"({n_layer} layers, n_embd {n_embd}, n_ff {n_ff}, {n_head}/{n_head_kv} heads, "
          f"vocab {n_vocab}), {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

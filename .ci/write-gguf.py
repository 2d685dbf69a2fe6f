#!/usr/bin/env python3
"""Writes a small GGUF file with llama.cpp's own Python writer (the `gguf` package on
PyPI, gguf-py), for the test that reads a file written by a standard writer:

    python3 -m pip install gguf          # brings numpy
    python3 .ci/write-gguf.py OUT.gguf
    RKNPU_GGUF_PY=OUT.gguf cargo test --test gguf_py standard_writer

Tensors (seeded values, numpy shape (n, k), GGUF dims [k, n]):
  w.f32   F32   4 x 64
  w.f16   F16   6 x 96
  w.q8_0  Q8_0  8 x 128  (quantised by gguf.quants.quantize)
  w.q4_0  Q4_0  8 x 128  (quantised by gguf.quants.quantize)
  w.q4_1  Q4_1  8 x 128  (quantised by gguf.quants.quantize)
  w.q5_0  Q5_0  8 x 128  (quantised by gguf.quants.quantize)
  w.q4_k  Q4_K  2 x 256  (random block bytes with finite scales: gguf-py has no Q4_K quantiser)
  w.q5_k  Q5_K  2 x 256  (likewise)
  w.q6_k  Q6_K  2 x 256  (likewise)
  w.q5_1  Q5_1  8 x 128  (quantised by gguf.quants.quantize)
  w.q2_k  Q2_K  2 x 256  (random block bytes with finite scales: gguf-py has no Q2_K quantiser)
  w.q3_k  Q3_K  2 x 256  (likewise)
  w.iq4_nl IQ4_NL 8 x 128 (likewise)
  w.mxfp4 MXFP4 8 x 128  (random codes; e8m0 exponents 124..130, scales 2^-3..2^3)
  w.q4_k.wide, w.q5_k.wide, w.q6_k.wide  64 x 1024  (random block bytes, finite scales)
(no Q1_0 tensor: gguf-py 0.19.0 knows the type code but has no Q1_0 dequantiser, so
there would be no reference; the Rust unit tests cover it)
and for each NAME a tensor NAME.ref, F32 of the same shape: gguf.quants.dequantize of
NAME's data, the values the Rust reader must produce; for w.q8_0 and w.q4_0 also
NAME.src, the f32 values gguf-py quantised, which the Rust writer must quantise to the
same bytes. Metadata: general.name,
general.alignment (64), an array of strings and an array of i32.
"""

import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

SEED = 20261201


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: write-gguf.py OUT.gguf")
    rng = np.random.default_rng(SEED)
    w = gguf.GGUFWriter(sys.argv[1], arch="rknpu-test")
    w.add_name("rknpu-driver gguf-py interoperability")
    w.add_custom_alignment(64)
    w.add_array("test.strings", ["alpha", "beta", "gamma"])
    w.add_array("test.ints", [1, -2, 3])

    def put(name: str, qtype: int, data: np.ndarray) -> None:
        w.add_tensor(name, data, raw_dtype=qtype)
        ref = gguf.quants.dequantize(data, qtype).astype(np.float32)
        w.add_tensor(name + ".ref", ref)

    def values(n: int, k: int) -> np.ndarray:
        return (rng.standard_normal((n, k)) * 0.5).astype(np.float32)

    put("w.f32", T.F32, values(4, 64))
    put("w.f16", T.F16, values(6, 96).astype(np.float16))
    for name, qtype in (("w.q8_0", T.Q8_0), ("w.q4_0", T.Q4_0)):
        src = values(8, 128)
        put(name, qtype, gguf.quants.quantize(src, qtype))
        w.add_tensor(name + ".src", src)

    # K types: random quants and scale bytes, each block's f16 scale(s) set finite (byte
    # offsets in the block: d and dmin of block_q4_K and block_q5_K, d of block_q6_K).
    # Tensors added later come after the first ones, whose seeded bytes stay as they were.
    for name, qtype, scale_at in (
        ("w.q4_k", T.Q4_K, (0, 2)),
        ("w.q6_k", T.Q6_K, (208,)),
        ("w.q5_k", T.Q5_K, (0, 2)),
    ):
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, size=(2, 256 // block * size), dtype=np.uint8)
        for at in scale_at:
            d = (rng.uniform(0.001, 0.05, size=2)).astype(np.float16).view(np.uint8)
            raw[:, at : at + 2] = d.reshape(2, 2)
        put(name, qtype, raw)

    # Quantised by gguf-py too; the Rust writer has no quantiser for these, so no .src.
    for name, qtype in (("w.q4_1", T.Q4_1), ("w.q5_0", T.Q5_0)):
        put(name, qtype, gguf.quants.quantize(values(8, 128), qtype))

    # Appended later, so the tensors above keep their bytes. Random blocks of n x k values
    # of `qtype`; the f16 scales at byte offsets `f16_at` of each block are set finite and
    # small, the e8m0 exponent bytes at `e8m0_at` near 127.
    def random_blocks(qtype: int, n: int, k: int, f16_at=(), e8m0_at=()) -> np.ndarray:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        nb = k // block
        raw = rng.integers(0, 256, size=(n, nb, size), dtype=np.uint8)
        for at in f16_at:
            d = rng.uniform(0.001, 0.05, size=(n, nb)).astype(np.float16)
            raw[:, :, at : at + 2] = d.view(np.uint8).reshape(n, nb, 2)
        for at in e8m0_at:
            raw[:, :, at] = rng.integers(124, 131, size=(n, nb), dtype=np.uint8)
        return raw.reshape(n, nb * size)

    put("w.q5_1", T.Q5_1, gguf.quants.quantize(values(8, 128), T.Q5_1))
    # Offsets: d and dmin of block_q2_K at 80 and 82, d of block_q3_K at 108, d of
    # block_iq4_nl at 0, e of block_mxfp4 at 0.
    put("w.q2_k", T.Q2_K, random_blocks(T.Q2_K, 2, 256, f16_at=(80, 82)))
    put("w.q3_k", T.Q3_K, random_blocks(T.Q3_K, 2, 256, f16_at=(108,)))
    put("w.iq4_nl", T.IQ4_NL, random_blocks(T.IQ4_NL, 8, 128, f16_at=(0,)))
    put("w.mxfp4", T.MXFP4, random_blocks(T.MXFP4, 8, 128, e8m0_at=(0,)))
    # K types wide enough for grouped int8 banks without padded output channels, which
    # `rknpu matmul --gguf` runs by default against llama.cpp's CPU error.
    put("w.q4_k.wide", T.Q4_K, random_blocks(T.Q4_K, 64, 1024, f16_at=(0, 2)))
    put("w.q5_k.wide", T.Q5_K, random_blocks(T.Q5_K, 64, 1024, f16_at=(0, 2)))
    put("w.q6_k.wide", T.Q6_K, random_blocks(T.Q6_K, 64, 1024, f16_at=(208,)))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()

//! The one table of the C declarations, and `rknpu.h` generated from it.
//!
//! `tests/header.rs` checks that `capi/include/rknpu.h` is [`header`]'s text (rewriting
//! it with `UPDATE_FIXTURES=1`) and that the functions of [`FUNCTIONS`] are exactly
//! those [`crate::ffi`] exports, with the Rust signatures the prototypes describe.

use crate::Code;

/// A function of the C API: its name, its C prototype and its comment.
#[derive(Clone, Copy, Debug)]
pub struct Function {
    /// The exported symbol.
    pub name: &'static str,
    /// The C prototype, without the trailing `;`.
    pub prototype: &'static str,
    /// The comment above it, one string per line.
    pub doc: &'static [&'static str],
}

/// Every function the library exports, in the header's order.
pub const FUNCTIONS: &[Function] = &[
    Function {
        name: "rknpu_open",
        prototype: "int rknpu_open(const char *spec, rknpu_device **out)",
        doc: &[
            "Opens an NPU into *out. spec NULL or \"\": the device RKNPU_DEVICE names, or",
            "else the board's NPU node; \"emu\", \"emu:rocket\", \"emu:vendor-0.9.6\": an",
            "emulated kernel (a simulator; no board needed); otherwise a node path.",
            "Returns 0, or RKNPU_ERR_ARG, RKNPU_ERR_NOT_FOUND or RKNPU_ERR_DEVICE.",
        ],
    },
    Function {
        name: "rknpu_close",
        prototype: "int rknpu_close(rknpu_device *dev)",
        doc: &[
            "Releases a device handle (NULL is ignored). Weights made on it stay valid:",
            "the node closes when the last of them is freed too. Returns 0, or",
            "RKNPU_ERR_ARG for a handle that is not a live device handle (closed",
            "already, or of another kind).",
        ],
    },
    Function {
        name: "rknpu_weights_i8",
        prototype: "int rknpu_weights_i8(rknpu_device *dev, const int8_t *w, const float *scale,\n                     uint32_t n, uint32_t k, rknpu_weights **out)",
        doc: &[
            "int8 weights: w holds n rows (output channels) of k values, row-major, as",
            "ggml's src0; scale holds n finite floats, one per row. rknpu_mul_mat",
            "quantises x to int8 per row and multiplies each result by both scales.",
        ],
    },
    Function {
        name: "rknpu_weights_i4",
        prototype: "int rknpu_weights_i4(rknpu_device *dev, const uint8_t *w, const float *scale,\n                     uint32_t n, uint32_t k, rknpu_weights **out)",
        doc: &[
            "int4 weights: w holds n rows of k/2 bytes, two's complement nibbles, value",
            "2i of a row in the low nibble of byte i and 2i+1 in the high nibble; k must",
            "be even. scale and the quantisation of x as rknpu_weights_i8.",
        ],
    },
    Function {
        name: "rknpu_weights_f16",
        prototype: "int rknpu_weights_f16(rknpu_device *dev, const uint16_t *w,\n                      uint32_t n, uint32_t k, rknpu_weights **out)",
        doc: &[
            "fp16 weights: w holds n rows of k IEEE-754 binary16 values (their bits).",
            "rknpu_mul_mat rounds x to fp16; sums are f32.",
        ],
    },
    Function {
        name: "rknpu_ggml_supported",
        prototype: "int rknpu_ggml_supported(rknpu_device *dev, uint32_t type, uint32_t n, uint32_t k,\n                         uint32_t m)",
        doc: &[
            "Whether rknpu_weights_ggml takes n rows of k values of ggml type `type` (the",
            "value of enum ggml_type, RKNPU_GGML_INT8 OR-ed in for an int8 bank) and a",
            "product of m rows can run against them:",
            "0 if so, else RKNPU_ERR_UNSUPPORTED or RKNPU_ERR_ARG with the reason. Plans",
            "only; allocates nothing on the device. A backend's supports_op asks this.",
        ],
    },
    Function {
        name: "rknpu_weights_ggml",
        prototype: "int rknpu_weights_ggml(rknpu_device *dev, uint32_t type, const void *data, size_t size,\n                       uint32_t n, uint32_t k, rknpu_weights **out)",
        doc: &[
            "Weights from ggml's raw tensor data: n rows of k values of ggml type `type`",
            "(F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,",
            "IQ4_NL, MXFP4, Q1_0), rows back to back, size bytes in all (checked before any",
            "is read). The library converts the blocks: BF16 to a bf16 bank, the rest to",
            "fp16 (dequantised in ggml's arithmetic); a value fp16 cannot hold is refused.",
            "With RKNPU_GGML_INT8 OR-ed into type: an int8 bank requantised per output",
            "channel (half the bytes, about 1 % relative error). data is not kept.",
        ],
    },
    Function {
        name: "rknpu_weights_free",
        prototype: "int rknpu_weights_free(rknpu_weights *w)",
        doc: &[
            "Frees weights and the plans cached with them (NULL is ignored). Returns 0,",
            "or RKNPU_ERR_ARG for a handle that is not a live weights handle.",
        ],
    },
    Function {
        name: "rknpu_mul_mat",
        prototype: "int rknpu_mul_mat(rknpu_weights *w, const float *x, uint32_t m, float *y)",
        doc: &[
            "y[m][n] = x[m][k] . w^T (ggml's mul_mat): x holds m rows of k floats and y",
            "receives m rows of n floats, both row-major; any m >= 1. The plans of the",
            "last 8 values of m are kept, so alternating prompt and decode sizes do not",
            "plan again.",
        ],
    },
    Function {
        name: "rknpu_mul_mat_ex",
        prototype: "int rknpu_mul_mat_ex(rknpu_weights *w, uint32_t x_type, const void *x, size_t x_stride,\n                     uint32_t m, float *y, size_t y_stride)",
        doc: &[
            "rknpu_mul_mat for rows in caller layout: m rows of k values of ggml type",
            "x_type (F32, F16 or BF16), row i at byte i * x_stride of x; row i of y at",
            "byte i * y_stride (a multiple of 4). F16 rows on fp16 weights (BF16 on bf16)",
            "go to the NPU unrounded. Shares the plans rknpu_mul_mat caches.",
        ],
    },
    Function {
        name: "rknpu_mul_mat_write",
        prototype: "int rknpu_mul_mat_write(rknpu_weights *w, uint32_t x_type, uint32_t m,\n                        rknpu_row_writer write, void *user, float *y, size_t y_stride)",
        doc: &[
            "rknpu_mul_mat_ex with the rows written by the caller straight into the",
            "NPU's input buffer: write(user, rows, stride, m, k) puts row i's k values of",
            "x_type at byte i * stride of rows and returns 0 (anything else stops the",
            "product: RKNPU_ERR_ARG). F16 on fp16 weights, BF16 on bf16 weights, where the",
            "plan of m rows reads them as plain rows (one row, or rows in one K wave",
            "and M tile); otherwise RKNPU_ERR_UNSUPPORTED before write is called (use",
            "rknpu_mul_mat_ex). Every value must be written and finite. write must not",
            "call the library on w.",
        ],
    },
    Function {
        name: "rknpu_batch_new",
        prototype: "int rknpu_batch_new(rknpu_weights *const *ws, uint32_t count, uint32_t m,\n                    rknpu_batch **out)",
        doc: &[
            "A batch: products of m rows against the count weights handles of ws (all of",
            "one k, on one device), one NPU job per call. It plans and holds buffers of",
            "its own; the weights handles may be freed before it.",
        ],
    },
    Function {
        name: "rknpu_batch_mul_mat",
        prototype: "int rknpu_batch_mul_mat(rknpu_batch *b, uint32_t x_type, const void *x, size_t x_stride,\n                        float *const *ys, const size_t *y_strides)",
        doc: &[
            "ys[j] = x . w_j^T for every member j in one job (a layer's Q, K and V, say):",
            "x as for rknpu_mul_mat_ex (the batch's m rows); row i of ys[j] at byte",
            "i * y_strides[j]. Results equal the members' single products bit for bit.",
        ],
    },
    Function {
        name: "rknpu_batch_free",
        prototype: "int rknpu_batch_free(rknpu_batch *b)",
        doc: &[
            "Frees a batch and its plans and buffers (NULL is ignored). Returns 0, or",
            "RKNPU_ERR_ARG for a handle that is not a live batch handle.",
        ],
    },
    Function {
        name: "rknpu_mul_mat_supported",
        prototype: "int rknpu_mul_mat_supported(rknpu_device *dev, uint32_t w_type, uint32_t x_type,\n                            uint32_t n, uint32_t k, uint32_t m)",
        doc: &[
            "Whether a product of m rows of ggml type x_type (F32, F16 or BF16) runs",
            "against n rows of k weights of w_type: RKNPU_WEIGHTS_I8 (rknpu_weights_i8),",
            "RKNPU_WEIGHTS_I4 (rknpu_weights_i4) or a ggml type code as",
            "rknpu_weights_ggml takes it (F16 is also rknpu_weights_f16's bank). 0 if so,",
            "else RKNPU_ERR_UNSUPPORTED or RKNPU_ERR_ARG with the reason. Arithmetic",
            "only: allocates nothing. A backend's supports_op asks this.",
        ],
    },
    Function {
        name: "rknpu_mul_mat_submit",
        prototype: "int rknpu_mul_mat_submit(rknpu_weights *w, uint32_t x_type, const void *x,\n                         size_t x_stride, uint32_t m, float *y, size_t y_stride,\n                         rknpu_job **out)",
        doc: &[
            "rknpu_mul_mat_ex started asynchronously: returns once x is copied and the",
            "product planned, with a job in *out. y is written by rknpu_job_wait (never",
            "by a worker thread), so it must stay valid until the job is waited for or",
            "freed. Products on one weights handle still take turns.",
        ],
    },
    Function {
        name: "rknpu_batch_submit",
        prototype: "int rknpu_batch_submit(rknpu_batch *b, uint32_t x_type, const void *x, size_t x_stride,\n                       float *const *ys, const size_t *y_strides, rknpu_job **out)",
        doc: &[
            "rknpu_batch_mul_mat started asynchronously, as rknpu_mul_mat_submit: x is",
            "copied, and each ys[j] is written by rknpu_job_wait.",
        ],
    },
    Function {
        name: "rknpu_job_done",
        prototype: "int rknpu_job_done(rknpu_job *job)",
        doc: &[
            "1 if the job has ended (rknpu_job_wait returns at once), 0 while it runs,",
            "RKNPU_ERR_ARG for a handle that is not a live job.",
        ],
    },
    Function {
        name: "rknpu_job_wait",
        prototype: "int rknpu_job_wait(rknpu_job *job)",
        doc: &[
            "Waits for the job and writes its results to the outputs given at",
            "submission: 0, or the product's error (nothing written). A job is waited",
            "for once; a second wait is RKNPU_ERR_ARG. Free the job afterwards.",
        ],
    },
    Function {
        name: "rknpu_job_free",
        prototype: "int rknpu_job_free(rknpu_job *job)",
        doc: &[
            "Frees a job (NULL is ignored). A job still running is detached: it ends on",
            "its own and its outputs are never written. Returns 0 or RKNPU_ERR_ARG.",
        ],
    },
    Function {
        name: "rknpu_last_error",
        prototype: "const char *rknpu_last_error(void)",
        doc: &[
            "The message of the last error on the calling thread (\"\" when the last call",
            "succeeded), NUL-terminated, valid until the thread's next rknpu_ call.",
        ],
    },
];

/// The header up to the error codes.
const BANNER: &[&str] = &[
    "/* rknpu.h: the C API of rknpu-driver (the RK3588 NPU).",
    " *",
    " * Generated by the rknpu-capi crate (capi/src/header.rs); do not edit. Regenerate",
    " * with: UPDATE_FIXTURES=1 cargo test -p rknpu-capi --test header",
    " *",
    " * Every int-returning function returns 0 on success and one of the negative",
    " * RKNPU_ERR_ codes below otherwise, with a message in rknpu_last_error().",
    " * Pointer arguments must not be NULL unless a comment says so. Handles are not",
    " * addresses but entries of a table: a freed, twice-freed or wrong-kind handle is",
    " * RKNPU_ERR_ARG. See docs/capi.md.",
    " */",
    "#ifndef RKNPU_H",
    "#define RKNPU_H",
    "",
    "#include <stddef.h>",
    "#include <stdint.h>",
    "",
    "#ifdef __cplusplus",
    "extern \"C\" {",
    "#endif",
    "",
    "/* An open NPU. */",
    "typedef struct rknpu_device rknpu_device;",
    "/* Weights packed for the NPU, usable for any number of rows m. */",
    "typedef struct rknpu_weights rknpu_weights;",
    "/* Products against several weights sharing one input, run as one job. */",
    "typedef struct rknpu_batch rknpu_batch;",
    "/* A product running asynchronously (rknpu_mul_mat_submit, rknpu_batch_submit). */",
    "typedef struct rknpu_job rknpu_job;",
    "/* Writes m rows of k values into rows, row i at byte i * stride; returns 0. */",
    "typedef int (*rknpu_row_writer)(void *user, void *rows, size_t stride, uint32_t m,",
    "                                uint32_t k);",
    "",
];

/// The constants the header defines beside the error codes: name, value, comment.
pub const CONSTANTS: &[(&str, u32, &str)] = &[
    (
        "RKNPU_WEIGHTS_I8",
        crate::WEIGHTS_I8,
        "The w_type of rknpu_mul_mat_supported for rknpu_weights_i8 weights.",
    ),
    (
        "RKNPU_WEIGHTS_I4",
        crate::WEIGHTS_I4,
        "The w_type of rknpu_mul_mat_supported for rknpu_weights_i4 weights.",
    ),
    (
        "RKNPU_GGML_INT8",
        crate::GGML_INT8,
        "OR-ed into a ggml type code: rknpu_weights_ggml makes an int8 bank.",
    ),
];

/// The header's text: the error codes of [`Code::ALL`], the [`CONSTANTS`] and the
/// functions of
/// [`FUNCTIONS`], with their comments.
pub fn header() -> String {
    let mut h = String::new();
    for line in BANNER {
        h.push_str(line);
        h.push('\n');
    }
    for code in Code::ALL {
        h.push_str(&format!("/* {} */\n", code.doc()));
        h.push_str(&format!("#define {} ({})\n", code.name(), *code as i32));
    }
    for (name, value, doc) in CONSTANTS {
        h.push_str(&format!("/* {doc} */\n#define {name} ({value}u)\n"));
    }
    for f in FUNCTIONS {
        h.push('\n');
        for line in f.doc {
            h.push_str(&format!("/* {line} */\n"));
        }
        h.push_str(f.prototype);
        h.push_str(";\n");
    }
    h.push_str(
        "\n#ifdef __cplusplus\n\
         }\n\
         #endif\n\
         \n\
         #endif /* RKNPU_H */\n",
    );
    h
}

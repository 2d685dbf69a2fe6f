// ggml-rknpu: what the backend's source files share.
//
// The backend is glue between ggml's backend interface and rknpu-driver's C API
// (rknpu.h): the weight conversion, planning, program generation and the NPU jobs are
// the library's; this code decides which ggml ops go to the NPU and moves their data.

#pragma once

#include "ggml-rknpu.h"

#include "ggml-backend-impl.h"
#include "ggml-impl.h"
#include "rknpu.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

// weights packed for the NPU: one rknpu_weights per 2-D plane (ne[2] * ne[3] of them)
struct ggml_rknpu_packed {
    ggml_type                    type;
    int64_t                      ne[4];
    std::vector<rknpu_weights *> planes;
    uint64_t                     serial; // unique for the process: names these weights in caches

    ggml_rknpu_packed() = default;
    ggml_rknpu_packed(const ggml_rknpu_packed &) = delete;
    ggml_rknpu_packed & operator=(const ggml_rknpu_packed &) = delete;
    ~ggml_rknpu_packed();
};

// the one NPU this backend drives, opened when the registry is first asked for
struct ggml_rknpu_device_context {
    rknpu_device * dev = nullptr;
    std::string    description;
};

// counters of what a backend instance ran
struct ggml_rknpu_stats {
    uint64_t graphs  = 0; // graph_compute calls
    uint64_t mul_mat = 0; // MUL_MAT nodes computed
    uint64_t jobs    = 0; // NPU jobs submitted
    uint64_t packs   = 0; // weights packed during compute (src0 not in a weight buffer)
    uint64_t written = 0; // products whose src1 rows were copied straight into the NPU's input
};

// batches (several weights sharing one input, one job) by their members' serials and m
struct ggml_rknpu_batch_cache {
    struct entry {
        rknpu_batch * batch    = nullptr;
        uint64_t      last_use = 0;
    };
    std::map<std::vector<uint64_t>, entry> entries;
    uint64_t                               clock = 0;

    ~ggml_rknpu_batch_cache();
};

struct ggml_rknpu_backend_context {
    rknpu_device *         dev   = nullptr;
    bool                   batch = true; // RKNPU_GGML_BATCH=0 turns batching off
    ggml_rknpu_stats       stats;
    ggml_rknpu_batch_cache batches;
};

// the type code the library packs weights of `type` as: `type` itself (an fp16 or bf16
// bank), or with RKNPU_GGML_INT8 for a quantised type when RKNPU_GGML_WEIGHTS=int8 asks
// for int8 banks (half the bytes, about 1 % relative error; docs/ggml.md)
uint32_t ggml_rknpu_weight_code(ggml_type type);

// packs every plane of tensor t from data (t's bytes, laid out as t); nullptr and a
// logged error when the library refuses
std::unique_ptr<ggml_rknpu_packed> ggml_rknpu_pack(rknpu_device * dev, const ggml_tensor * t, const void * data);

// buffer type
ggml_backend_buffer_type_t ggml_backend_rknpu_buffer_type(ggml_backend_dev_t dev);
bool                       ggml_backend_buffer_is_rknpu(ggml_backend_buffer_t buffer);

// the packed weights of t when t lies in a weight buffer of this backend and was packed
// when it was set; *overlaps is true when t's bytes overlap packed weights without being
// exactly one packed tensor (a view into one), whose raw bytes the buffer does not hold
const ggml_rknpu_packed * ggml_backend_rknpu_buffer_find_packed(const ggml_tensor * t, bool * overlaps);

// ops that move no data (views of their source): claimed always, nothing to compute
bool ggml_rknpu_is_view_op(ggml_op op);

// MUL_MAT
bool        ggml_rknpu_supports_mul_mat(rknpu_device * dev, const ggml_tensor * op);
ggml_status ggml_rknpu_mul_mat(ggml_rknpu_backend_context * ctx, ggml_tensor * dst);

// the MUL_MAT nodes from node i on that share node i's src1 and can run as one job
// (2-D, weights packed in a weight buffer), skipping no-op nodes between them; node i
// alone when none can join it
std::vector<ggml_tensor *> ggml_rknpu_mul_mat_group(ggml_cgraph * cgraph, int i, int * last);
ggml_status                ggml_rknpu_mul_mat_batch(ggml_rknpu_backend_context * ctx,
                                                    const std::vector<ggml_tensor *> & group);

// ggml-rknpu: MUL_MAT on the NPU.
//
// dst[i3][i2] = src1[i3][i2] . src0[i3 / r3][i2 / r2]^T for every plane, each plane one
// NPU job of the library (rknpu_mul_mat_ex). src0 comes packed from a weight buffer, or
// is packed for this call when it is an activation or a test's tensor (any row and plane
// strides, rows themselves contiguous). F16 (BF16) src1 rows on an fp16 (bf16) bank are
// copied straight into the NPU's input buffer where the library reads them as plain rows
// (rknpu_mul_mat_write). Other src1 rows are read where they are (any row stride); only
// a src1 whose values are not contiguous within a row (a permuted view) or whose rows
// overlap is gathered first. Products that share their src1 in a split run as
// one job (ggml_rknpu_mul_mat_group, below).

#include "ggml-rknpu-common.h"

#include <cstring>

bool ggml_rknpu_supports_mul_mat(rknpu_device * dev, const ggml_tensor * op) {
    const ggml_tensor * src0 = op->src[0];
    const ggml_tensor * src1 = op->src[1];
    // the weight and activation types are the library's to judge (its limits query below)
    if (op->type != GGML_TYPE_F32 || src0->nb[0] != ggml_type_size(src0->type)) {
        return false;
    }
    // the library takes 32-bit sizes; the scheduler never asks for zero-sized planes here,
    // but a row count of 0 is planned as 1 so that the answer stays the shape's
    if (src0->ne[0] > UINT32_MAX || src0->ne[1] > UINT32_MAX || src1->ne[1] > UINT32_MAX) {
        return false;
    }
    if (src1->ne[2] % src0->ne[2] != 0 || src1->ne[3] % src0->ne[3] != 0) {
        return false;
    }
    // a result of one value: ggml's error measure is then that value's relative error,
    // which a sum that cancels makes as large as chance allows wherever the NPU rounds
    // otherwise than ggml's CPU reference (f32 weights rounded to fp16, or activations in
    // fp16 where the CPU quantises them for quantised weights); F16 and BF16 weights
    // round as the CPU does (docs/ggml.md, "Limits")
    if (ggml_nelements(op) == 1 && src0->type != GGML_TYPE_F16 && src0->type != GGML_TYPE_BF16) {
        return false;
    }
    const uint32_t m = (uint32_t) std::max<int64_t>(src1->ne[1], 1);
    return rknpu_mul_mat_supported(dev, ggml_rknpu_weight_code(src0->type), (uint32_t) src1->type,
                                   (uint32_t) src0->ne[1], (uint32_t) src0->ne[0], m) == 0;
}

// row r of one src1 plane, its k values copied to dst: at once where they are contiguous,
// value by value in a permuted view
static void ggml_rknpu_copy_row(const ggml_tensor * src1, const char * plane, int64_t r, int64_t k, char * dst) {
    const size_t ts  = ggml_type_size(src1->type);
    const char * src = plane + r * src1->nb[1];
    if (src1->nb[0] == ts) {
        memcpy(dst, src, k * ts);
        return;
    }
    for (int64_t c = 0; c < k; c++) {
        memcpy(dst + c * ts, src + c * src1->nb[0], ts);
    }
}

// the rows of one src1 plane, contiguous within each row and not overlapping: either the
// plane itself or a gathered copy in buf
static const char * ggml_rknpu_src1_rows(const ggml_tensor * src1, const char * plane, std::vector<char> & buf,
                                         size_t * stride) {
    const size_t ts = ggml_type_size(src1->type);
    if (src1->nb[0] == ts && (src1->ne[1] == 1 || src1->nb[1] >= ts * src1->ne[0])) {
        *stride = src1->nb[1];
        return plane;
    }
    const int64_t k = src1->ne[0];
    const int64_t m = src1->ne[1];
    buf.resize(k * m * ts);
    for (int64_t r = 0; r < m; r++) {
        ggml_rknpu_copy_row(src1, plane, r, k, buf.data() + r * k * ts);
    }
    *stride = k * ts;
    return buf.data();
}

// the rows of one src1 plane, for rknpu_mul_mat_write to copy straight into the NPU's
// input buffer
struct ggml_rknpu_plane_rows {
    const ggml_tensor * src1;
    const char *        plane;
};

static int ggml_rknpu_write_rows(void * user, void * rows, size_t stride, uint32_t m, uint32_t k) {
    const auto * p = (const ggml_rknpu_plane_rows *) user;
    for (uint32_t r = 0; r < m; r++) {
        ggml_rknpu_copy_row(p->src1, p->plane, r, k, (char *) rows + r * stride);
    }
    return 0;
}

ggml_status ggml_rknpu_mul_mat(ggml_rknpu_backend_context * ctx, ggml_tensor * dst) {
    const ggml_tensor * src0 = dst->src[0];
    const ggml_tensor * src1 = dst->src[1];

    bool                               overlaps = false;
    const ggml_rknpu_packed *          w        = ggml_backend_rknpu_buffer_find_packed(src0, &overlaps);
    std::unique_ptr<ggml_rknpu_packed> local;
    if (w == nullptr) {
        if (overlaps) {
            GGML_LOG_ERROR("%s: %s reads %s, a view into weights packed for the NPU whose bytes are not kept\n",
                           __func__, dst->name, src0->name);
            return GGML_STATUS_FAILED;
        }
        local = ggml_rknpu_pack(ctx->dev, src0, src0->data);
        if (!local) {
            return GGML_STATUS_FAILED;
        }
        ctx->stats.packs++;
        w = local.get();
    }

    const int64_t m  = src1->ne[1];
    const int64_t r2 = src1->ne[2] / src0->ne[2];
    const int64_t r3 = src1->ne[3] / src0->ne[3];

    std::vector<char> gathered;
    for (int64_t i13 = 0; i13 < src1->ne[3]; i13++) {
        for (int64_t i12 = 0; i12 < src1->ne[2]; i12++) {
            const int64_t   i02   = i12 / r2;
            const int64_t   i03   = i13 / r3;
            rknpu_weights * plane = w->planes[i03 * src0->ne[2] + i02];

            const char * x_plane = (const char *) src1->data + i12 * src1->nb[2] + i13 * src1->nb[3];
            float *      y       = (float *) ((char *) dst->data + i12 * dst->nb[2] + i13 * dst->nb[3]);

            // 16-bit rows of the bank's own type are copied straight into the NPU's input
            // buffer where the library reads them as plain rows; otherwise (or when it
            // says no) they are handed over as rows
            int rc = RKNPU_ERR_UNSUPPORTED;
            if (src1->type == GGML_TYPE_F16 || src1->type == GGML_TYPE_BF16) {
                ggml_rknpu_plane_rows rows = { src1, x_plane };
                rc = rknpu_mul_mat_write(plane, (uint32_t) src1->type, (uint32_t) m, ggml_rknpu_write_rows, &rows, y,
                                         dst->nb[1]);
                ctx->stats.written += rc == 0;
            }
            if (rc == RKNPU_ERR_UNSUPPORTED) {
                size_t       x_stride = 0;
                const char * x        = ggml_rknpu_src1_rows(src1, x_plane, gathered, &x_stride);
                rc = rknpu_mul_mat_ex(plane, (uint32_t) src1->type, x, x_stride, (uint32_t) m, y, dst->nb[1]);
            }
            if (rc != 0) {
                GGML_LOG_ERROR("%s: %s (%s x %s, plane %lld/%lld): %s\n", __func__, dst->name,
                               ggml_type_name(src0->type), ggml_type_name(src1->type), (long long) i12,
                               (long long) i13, rknpu_last_error());
                return GGML_STATUS_FAILED;
            }
            ctx->stats.jobs++;
        }
    }
    ctx->stats.mul_mat++;
    return GGML_STATUS_SUCCESS;
}

// products that share their input, in one job

ggml_rknpu_batch_cache::~ggml_rknpu_batch_cache() {
    for (auto & [key, e] : entries) {
        rknpu_batch_free(e.batch);
    }
}

static constexpr size_t GGML_RKNPU_MAX_BATCHES = 64;

bool ggml_rknpu_is_view_op(ggml_op op) {
    switch (op) {
        case GGML_OP_NONE:
        case GGML_OP_RESHAPE:
        case GGML_OP_VIEW:
        case GGML_OP_PERMUTE:
        case GGML_OP_TRANSPOSE:
            return true;
        default:
            return false;
    }
}

// a node graph_compute has nothing to do for
static bool ggml_rknpu_is_noop(const ggml_tensor * node) {
    return ggml_rknpu_is_view_op(node->op) || (node->flags & GGML_TENSOR_FLAG_COMPUTE) == 0 || ggml_is_empty(node);
}

// a MUL_MAT that can be a batch member: one plane, src0 packed when it was loaded
static const ggml_rknpu_packed * ggml_rknpu_batchable(const ggml_tensor * node) {
    const ggml_tensor * src0 = node->src[0];
    const ggml_tensor * src1 = node->src[1];
    if (node->op != GGML_OP_MUL_MAT || src0->ne[2] != 1 || src0->ne[3] != 1 || src1->ne[2] != 1 ||
        src1->ne[3] != 1) {
        return nullptr;
    }
    bool overlaps = false;
    return ggml_backend_rknpu_buffer_find_packed(src0, &overlaps);
}

std::vector<ggml_tensor *> ggml_rknpu_mul_mat_group(ggml_cgraph * cgraph, int i, int * last) {
    std::vector<ggml_tensor *> group = { cgraph->nodes[i] };
    *last                            = i;
    if (ggml_rknpu_batchable(cgraph->nodes[i]) == nullptr) {
        return group;
    }
    const ggml_tensor * src1 = cgraph->nodes[i]->src[1];
    for (int j = i + 1; j < cgraph->n_nodes; j++) {
        ggml_tensor * node = cgraph->nodes[j];
        if (ggml_rknpu_is_noop(node)) {
            continue;
        }
        if (node->src[1] != src1 || ggml_rknpu_batchable(node) == nullptr) {
            break;
        }
        group.push_back(node);
        *last = j;
    }
    return group;
}

// the cached batch of these weights for m rows, made when missing (the least recently
// used is dropped beyond GGML_RKNPU_MAX_BATCHES)
static rknpu_batch * ggml_rknpu_batch_for(ggml_rknpu_batch_cache & cache,
                                          const std::vector<const ggml_rknpu_packed *> & members, uint32_t m) {
    std::vector<uint64_t> key;
    for (const auto * w : members) {
        key.push_back(w->serial);
    }
    key.push_back(m);
    cache.clock++;
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) {
        it->second.last_use = cache.clock;
        return it->second.batch;
    }
    std::vector<rknpu_weights *> ws;
    for (const auto * w : members) {
        ws.push_back(w->planes[0]);
    }
    rknpu_batch * batch = nullptr;
    if (rknpu_batch_new(ws.data(), (uint32_t) ws.size(), m, &batch) != 0) {
        GGML_LOG_ERROR("%s: %zu weights, %u rows: %s\n", __func__, ws.size(), m, rknpu_last_error());
        return nullptr;
    }
    if (cache.entries.size() >= GGML_RKNPU_MAX_BATCHES) {
        auto oldest = cache.entries.begin();
        for (auto e = cache.entries.begin(); e != cache.entries.end(); ++e) {
            if (e->second.last_use < oldest->second.last_use) {
                oldest = e;
            }
        }
        rknpu_batch_free(oldest->second.batch);
        cache.entries.erase(oldest);
    }
    cache.entries[key] = { batch, cache.clock };
    return batch;
}

ggml_status ggml_rknpu_mul_mat_batch(ggml_rknpu_backend_context * ctx, const std::vector<ggml_tensor *> & group) {
    const ggml_tensor *                     src1 = group[0]->src[1];
    std::vector<const ggml_rknpu_packed *> members;
    std::vector<float *>                   ys;
    std::vector<size_t>                    strides;
    for (ggml_tensor * node : group) {
        members.push_back(ggml_rknpu_batchable(node));
        ys.push_back((float *) node->data);
        strides.push_back(node->nb[1]);
    }
    rknpu_batch * batch = ggml_rknpu_batch_for(ctx->batches, members, (uint32_t) src1->ne[1]);
    if (batch == nullptr) {
        return GGML_STATUS_FAILED;
    }
    std::vector<char> gathered;
    size_t            x_stride = 0;
    const char *      x        = ggml_rknpu_src1_rows(src1, (const char *) src1->data, gathered, &x_stride);
    if (rknpu_batch_mul_mat(batch, (uint32_t) src1->type, x, x_stride, ys.data(), strides.data()) != 0) {
        GGML_LOG_ERROR("%s: %s and %zu more sharing %s: %s\n", __func__, group[0]->name, group.size() - 1,
                       src1->name, rknpu_last_error());
        return GGML_STATUS_FAILED;
    }
    ctx->stats.jobs++;
    ctx->stats.mul_mat += group.size();
    return GGML_STATUS_SUCCESS;
}

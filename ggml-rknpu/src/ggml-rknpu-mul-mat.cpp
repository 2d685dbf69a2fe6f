// ggml-rknpu: MUL_MAT on the NPU.
//
// dst[i3][i2] = src1[i3][i2] . src0[i3 / r3][i2 / r2]^T for every plane, each plane one
// NPU job of the library (rknpu_mul_mat_ex). src0 comes packed from a weight buffer, or
// is packed for this call when it is an activation or a test's tensor (any row and plane
// strides, rows themselves contiguous). src1 rows are read where they are (any row
// stride); only a src1 whose values are not contiguous within a row (a permuted view) is
// gathered first.

#include "ggml-rknpu-common.h"

#include <cstring>

static bool ggml_rknpu_src1_type_supported(ggml_type type) {
    return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16;
}

bool ggml_rknpu_supports_mul_mat(rknpu_device * dev, const ggml_tensor * op) {
    const ggml_tensor * src0 = op->src[0];
    const ggml_tensor * src1 = op->src[1];
    // the weight type is the library's to judge (rknpu_ggml_supported below)
    if (!ggml_rknpu_src1_type_supported(src1->type) || op->type != GGML_TYPE_F32 ||
        src0->nb[0] != ggml_type_size(src0->type)) {
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
    const uint32_t m = (uint32_t) std::max<int64_t>(src1->ne[1], 1);
    return rknpu_ggml_supported(dev, (uint32_t) src0->type, (uint32_t) src0->ne[1], (uint32_t) src0->ne[0], m) == 0;
}

// the rows of one src1 plane, contiguous within each row: either the plane itself or a
// gathered copy in buf
static const char * ggml_rknpu_src1_rows(const ggml_tensor * src1, const char * plane, std::vector<char> & buf,
                                         size_t * stride) {
    const size_t ts = ggml_type_size(src1->type);
    if (src1->nb[0] == ts) {
        *stride = src1->nb[1];
        return plane;
    }
    const int64_t k = src1->ne[0];
    const int64_t m = src1->ne[1];
    buf.resize(k * m * ts);
    for (int64_t r = 0; r < m; r++) {
        for (int64_t c = 0; c < k; c++) {
            memcpy(buf.data() + (r * k + c) * ts, plane + r * src1->nb[1] + c * src1->nb[0], ts);
        }
    }
    *stride = k * ts;
    return buf.data();
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
            size_t       x_stride = 0;
            const char * x        = ggml_rknpu_src1_rows(src1, x_plane, gathered, &x_stride);
            float *      y        = (float *) ((char *) dst->data + i12 * dst->nb[2] + i13 * dst->nb[3]);

            const int rc = rknpu_mul_mat_ex(plane, (uint32_t) src1->type, x, x_stride, (uint32_t) m, y, dst->nb[1]);
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

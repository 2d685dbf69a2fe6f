// ggml-rknpu: the backend's buffer type.
//
// A buffer is anonymous host memory mapped without reserving it, so pages cost memory
// only once they are written. Activations, results and any tensor the NPU does not
// consume as weights live there as ggml lays them out; the buffer is not a host buffer
// to ggml, so the scheduler copies data in and out of it and never runs a CPU op on it.
//
// In a buffer that holds model weights (usage GGML_BACKEND_BUFFER_USAGE_WEIGHTS, set
// by llama.cpp before it loads the weights), a whole-tensor set_tensor of a matrix the
// library converts is packed into NPU weight banks straight from the caller's bytes
// and never copied into the buffer: the weights are held once, by the NPU's memory.

#include "ggml-rknpu-common.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

static constexpr size_t GGML_RKNPU_ALIGNMENT = 64;

struct ggml_backend_rknpu_buffer_context {
    rknpu_device * dev  = nullptr;
    void *         base = nullptr;
    size_t         size = 0;
    bool           mapped = false;
    // packed weights by their tensor's data address (weight buffers only)
    std::map<const void *, std::unique_ptr<ggml_rknpu_packed>> packed;
};

ggml_rknpu_packed::~ggml_rknpu_packed() {
    for (rknpu_weights * w : planes) {
        rknpu_weights_free(w);
    }
}

uint32_t ggml_rknpu_weight_code(ggml_type type) {
    static const bool int8 = [] {
        const char * w = getenv("RKNPU_GGML_WEIGHTS");
        if (w != nullptr && strcmp(w, "int8") != 0 && strcmp(w, "fp16") != 0) {
            GGML_LOG_WARN("%s: RKNPU_GGML_WEIGHTS=%s is neither int8 nor fp16: fp16\n", __func__, w);
        }
        return w != nullptr && strcmp(w, "int8") == 0;
    }();
    return (uint32_t) type | (int8 && ggml_is_quantized(type) ? RKNPU_GGML_INT8 : 0u);
}

std::unique_ptr<ggml_rknpu_packed> ggml_rknpu_pack(rknpu_device * dev, const ggml_tensor * t, const void * data) {
    static std::atomic<uint64_t> next_serial{ 1 };
    auto                         packed = std::make_unique<ggml_rknpu_packed>();
    packed->type                        = t->type;
    packed->serial                      = next_serial++;
    for (int i = 0; i < 4; i++) {
        packed->ne[i] = t->ne[i];
    }
    // rows are contiguous (supports_op asks for nb[0] to be one element or block); the
    // library takes the rows of a plane back to back, so strided rows are gathered
    const size_t      row = ggml_row_size(t->type, t->ne[0]);
    std::vector<char> gathered;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++) {
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++) {
            const char * plane = (const char *) data + i2 * t->nb[2] + i3 * t->nb[3];
            if (t->nb[1] != row) {
                gathered.resize(row * t->ne[1]);
                for (int64_t i1 = 0; i1 < t->ne[1]; i1++) {
                    memcpy(gathered.data() + i1 * row, plane + i1 * t->nb[1], row);
                }
                plane = gathered.data();
            }
            rknpu_weights * w  = nullptr;
            const int       rc = rknpu_weights_ggml(dev, ggml_rknpu_weight_code(t->type), plane, row * t->ne[1],
                                                    (uint32_t) t->ne[1], (uint32_t) t->ne[0], &w);
            if (rc != 0) {
                GGML_LOG_ERROR("%s: %s (%s [%lld x %lld], plane %lld/%lld): %s\n", __func__, t->name,
                               ggml_type_name(t->type), (long long) t->ne[1], (long long) t->ne[0], (long long) i2,
                               (long long) i3, rknpu_last_error());
                return nullptr;
            }
            packed->planes.push_back(w);
        }
    }
    return packed;
}

// whether t can be packed at set_tensor: a contiguous matrix (or stack of them) whose
// type and shape the library takes (it knows which ggml types it converts)
static bool ggml_rknpu_packable(rknpu_device * dev, const ggml_tensor * t) {
    return ggml_is_contiguous(t) && t->ne[1] > 1 && t->ne[0] <= UINT32_MAX && t->ne[1] <= UINT32_MAX &&
           rknpu_ggml_supported(dev, ggml_rknpu_weight_code(t->type), (uint32_t) t->ne[1], (uint32_t) t->ne[0],
                                1) == 0;
}

// After packing, the caller's bytes are not needed again. llama.cpp hands set_tensor
// the model file's own mapping, whose pages would otherwise stay resident beside the
// banks: ask the kernel to reclaim them now. MADV_PAGEOUT never changes what the memory
// holds (a file page is read again on the next access; anonymous memory without swap
// simply stays), so this is safe whatever the bytes are.
static void ggml_rknpu_release_source(const void * data, size_t size) {
#ifdef MADV_PAGEOUT
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) {
        return;
    }
    const uintptr_t mask  = (uintptr_t) page - 1;
    const uintptr_t begin = ((uintptr_t) data + mask) & ~mask;
    const uintptr_t end   = ((uintptr_t) data + size) & ~mask;
    if (end > begin) {
        // advice only: a kernel without MADV_PAGEOUT (before Linux 5.4) refuses it
        (void) madvise((void *) begin, end - begin, MADV_PAGEOUT);
    }
#else
    GGML_UNUSED(data);
    GGML_UNUSED(size);
#endif
}

// drops packed weights whose bytes overlap [begin, end)
static void ggml_rknpu_buffer_forget(ggml_backend_rknpu_buffer_context * ctx, const char * begin, const char * end) {
    for (auto it = ctx->packed.begin(); it != ctx->packed.end();) {
        const char * p0 = (const char *) it->first;
        const char * p1 = p0 + it->second->ne[1] * it->second->ne[2] * it->second->ne[3] *
                                   ggml_row_size(it->second->type, it->second->ne[0]);
        if (p0 < end && begin < p1) {
            it = ctx->packed.erase(it);
        } else {
            ++it;
        }
    }
}

static void ggml_backend_rknpu_buffer_free_buffer(ggml_backend_buffer_t buffer) {
    auto * ctx = (ggml_backend_rknpu_buffer_context *) buffer->context;
    if (ctx->mapped) {
        munmap(ctx->base, ctx->size);
    }
    delete ctx;
}

static void * ggml_backend_rknpu_buffer_get_base(ggml_backend_buffer_t buffer) {
    auto * ctx = (ggml_backend_rknpu_buffer_context *) buffer->context;
    return ctx->base;
}

static void ggml_backend_rknpu_buffer_memset_tensor(ggml_backend_buffer_t buffer, ggml_tensor * tensor, uint8_t value,
                                                    size_t offset, size_t size) {
    auto * ctx = (ggml_backend_rknpu_buffer_context *) buffer->context;
    char * p   = (char *) tensor->data + offset;
    ggml_rknpu_buffer_forget(ctx, p, p + size);
    memset(p, value, size);
}

static void ggml_backend_rknpu_buffer_set_tensor(ggml_backend_buffer_t buffer, ggml_tensor * tensor, const void * data,
                                                 size_t offset, size_t size) {
    auto * ctx = (ggml_backend_rknpu_buffer_context *) buffer->context;
    char * p   = (char *) tensor->data + offset;
    ggml_rknpu_buffer_forget(ctx, p, p + size);
    const bool whole = offset == 0 && size == ggml_nbytes(tensor) && tensor->view_src == nullptr;
    if (ggml_backend_buffer_get_usage(buffer) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS && whole &&
        ggml_rknpu_packable(ctx->dev, tensor)) {
        auto packed = ggml_rknpu_pack(ctx->dev, tensor, data);
        if (packed) {
            ctx->packed[tensor->data] = std::move(packed);
            ggml_rknpu_release_source(data, size);
            return;
        }
        // refused: keep the bytes, so the op that uses them fails with the library's reason
    }
    memcpy(p, data, size);
}

static void ggml_backend_rknpu_buffer_get_tensor(ggml_backend_buffer_t buffer, const ggml_tensor * tensor, void * data,
                                                 size_t offset, size_t size) {
    GGML_UNUSED(buffer);
    bool overlaps = false;
    if (ggml_backend_rknpu_buffer_find_packed(tensor, &overlaps) != nullptr || overlaps) {
        // the bytes were packed for the NPU and are not held: say so, and hand back NaNs
        // (all-ones bytes are NaN in every float and block-scale field) rather than zeros
        GGML_LOG_ERROR("%s: %s was packed into NPU weights when it was loaded; its bytes are not kept\n", __func__,
                       tensor->name);
        memset(data, 0xFF, size);
        return;
    }
    memcpy(data, (const char *) tensor->data + offset, size);
}

static bool ggml_backend_rknpu_buffer_cpy_tensor(ggml_backend_buffer_t buffer, const ggml_tensor * src,
                                                 ggml_tensor * dst) {
    GGML_UNUSED(buffer);
    GGML_UNUSED(src);
    GGML_UNUSED(dst);
    // ggml copies through get_tensor and set_tensor, which keep the packed weights right
    return false;
}

static void ggml_backend_rknpu_buffer_clear(ggml_backend_buffer_t buffer, uint8_t value) {
    auto * ctx = (ggml_backend_rknpu_buffer_context *) buffer->context;
    ctx->packed.clear();
    if (ctx->mapped) {
        memset(ctx->base, value, ctx->size);
    }
}

static void ggml_backend_rknpu_buffer_reset(ggml_backend_buffer_t buffer) {
    auto * ctx = (ggml_backend_rknpu_buffer_context *) buffer->context;
    ctx->packed.clear();
}

static const ggml_backend_buffer_i ggml_backend_rknpu_buffer_i = {
    /* .free_buffer   = */ ggml_backend_rknpu_buffer_free_buffer,
    /* .get_base      = */ ggml_backend_rknpu_buffer_get_base,
    /* .init_tensor   = */ nullptr,
    /* .memset_tensor = */ ggml_backend_rknpu_buffer_memset_tensor,
    /* .set_tensor    = */ ggml_backend_rknpu_buffer_set_tensor,
    /* .get_tensor    = */ ggml_backend_rknpu_buffer_get_tensor,
    /* .set_tensor_2d = */ nullptr,
    /* .get_tensor_2d = */ nullptr,
    /* .cpy_tensor    = */ ggml_backend_rknpu_buffer_cpy_tensor,
    /* .clear         = */ ggml_backend_rknpu_buffer_clear,
    /* .reset         = */ ggml_backend_rknpu_buffer_reset,
};

bool ggml_backend_buffer_is_rknpu(ggml_backend_buffer_t buffer) {
    return buffer != nullptr && buffer->iface.get_base == ggml_backend_rknpu_buffer_get_base;
}

const ggml_rknpu_packed * ggml_backend_rknpu_buffer_find_packed(const ggml_tensor * t, bool * overlaps) {
    *overlaps                    = false;
    ggml_backend_buffer_t buffer = t->view_src ? t->view_src->buffer : t->buffer;
    if (!ggml_backend_buffer_is_rknpu(buffer)) {
        return nullptr;
    }
    auto * ctx = (ggml_backend_rknpu_buffer_context *) buffer->context;
    auto   it  = ctx->packed.find(t->data);
    if (it != ctx->packed.end() && it->second->type == t->type && t->view_src == nullptr) {
        bool same = true;
        for (int i = 0; i < 4; i++) {
            same = same && it->second->ne[i] == t->ne[i];
        }
        if (same) {
            return it->second.get();
        }
    }
    const char * begin = (const char *) t->data;
    const char * end   = begin + ggml_nbytes(t);
    for (const auto & [addr, packed] : ctx->packed) {
        const char * p0 = (const char *) addr;
        const char * p1 = p0 + packed->ne[1] * packed->ne[2] * packed->ne[3] * ggml_row_size(packed->type, packed->ne[0]);
        if (p0 < end && begin < p1) {
            *overlaps = true;
        }
    }
    return nullptr;
}

// buffer type

static const char * ggml_backend_rknpu_buffer_type_get_name(ggml_backend_buffer_type_t buft) {
    GGML_UNUSED(buft);
    return GGML_RKNPU_NAME;
}

static ggml_backend_buffer_t ggml_backend_rknpu_buffer_type_alloc_buffer(ggml_backend_buffer_type_t buft,
                                                                         size_t                     size) {
    auto * dev_ctx = (ggml_rknpu_device_context *) buft->device->context;
    auto * ctx     = new ggml_backend_rknpu_buffer_context;
    ctx->dev       = dev_ctx->dev;
    ctx->size      = size;
    if (size == 0) {
        // ggml asks for empty buffers (a model's dummy buffer): any aligned, non-null base
        alignas(GGML_RKNPU_ALIGNMENT) static char empty[GGML_RKNPU_ALIGNMENT];
        ctx->base = empty;
    } else {
        void * p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            GGML_LOG_ERROR("%s: cannot map %zu bytes: %s\n", __func__, size, strerror(errno));
            delete ctx;
            return nullptr;
        }
        ctx->base   = p;
        ctx->mapped = true;
    }
    return ggml_backend_buffer_init(buft, ggml_backend_rknpu_buffer_i, ctx, size);
}

static size_t ggml_backend_rknpu_buffer_type_get_alignment(ggml_backend_buffer_type_t buft) {
    GGML_UNUSED(buft);
    return GGML_RKNPU_ALIGNMENT;
}

static bool ggml_backend_rknpu_buffer_type_is_host(ggml_backend_buffer_type_t buft) {
    GGML_UNUSED(buft);
    // packed weights' bytes are not in the buffer: no CPU op may read it in place
    return false;
}

ggml_backend_buffer_type_t ggml_backend_rknpu_buffer_type(ggml_backend_dev_t dev) {
    static ggml_backend_buffer_type buft = {
        /* .iface   = */ {
                          /* .get_name       = */ ggml_backend_rknpu_buffer_type_get_name,
                          /* .alloc_buffer   = */ ggml_backend_rknpu_buffer_type_alloc_buffer,
                          /* .get_alignment  = */ ggml_backend_rknpu_buffer_type_get_alignment,
                          /* .get_max_size   = */ nullptr,
                          /* .get_alloc_size = */ nullptr,
                          /* .is_host        = */ ggml_backend_rknpu_buffer_type_is_host,
                          },
        /* .device  = */ dev,
        /* .context = */ nullptr,
    };
    return &buft;
}

// ggml-rknpu: the backend registry, its device "RKNPU" and the backend (stream).
//
// One device: the NPU that rknpu_open(NULL) finds (a board's, or the emulated one that
// RKNPU_DEVICE=emu selects). When none opens, the registry has no device and says why
// once. See docs/ggml.md.

#include "ggml-rknpu-common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

// backend (stream)

static const char * ggml_backend_rknpu_get_name(ggml_backend_t backend) {
    GGML_UNUSED(backend);
    return GGML_RKNPU_NAME;
}

static void ggml_backend_rknpu_free(ggml_backend_t backend) {
    auto * ctx = (ggml_rknpu_backend_context *) backend->context;
    const char * stats = getenv("RKNPU_GGML_STATS");
    if (stats != nullptr && stats[0] != '\0' && strcmp(stats, "0") != 0) {
        fprintf(stderr,
                "rknpu: %llu graph computes, %llu MUL_MAT nodes, %llu NPU jobs, %llu weights packed per call, "
                "%llu inputs written in place\n",
                (unsigned long long) ctx->stats.graphs, (unsigned long long) ctx->stats.mul_mat,
                (unsigned long long) ctx->stats.jobs, (unsigned long long) ctx->stats.packs,
                (unsigned long long) ctx->stats.written);
    }
    delete ctx;
    delete backend;
}

static ggml_status ggml_backend_rknpu_graph_compute(ggml_backend_t backend, ggml_cgraph * cgraph) {
    auto * ctx = (ggml_rknpu_backend_context *) backend->context;
    ctx->stats.graphs++;
    for (int i = 0; i < cgraph->n_nodes; i++) {
        ggml_tensor * node = cgraph->nodes[i];
        if ((node->flags & GGML_TENSOR_FLAG_COMPUTE) == 0 || ggml_is_empty(node) || ggml_rknpu_is_view_op(node->op)) {
            continue;
        }
        switch (node->op) {
            case GGML_OP_MUL_MAT:
                {
                    int                              last  = i;
                    const std::vector<ggml_tensor *> group = ctx->batch ?
                                                                 ggml_rknpu_mul_mat_group(cgraph, i, &last) :
                                                                 std::vector<ggml_tensor *>{ node };
                    const ggml_status status =
                        group.size() > 1 ? ggml_rknpu_mul_mat_batch(ctx, group) : ggml_rknpu_mul_mat(ctx, node);
                    if (status != GGML_STATUS_SUCCESS) {
                        return status;
                    }
                    i = last;
                    break;
                }
            default:
                GGML_LOG_ERROR("%s: %s: op %s is not one this backend claims\n", __func__, node->name,
                               ggml_op_desc(node));
                return GGML_STATUS_FAILED;
        }
    }
    return GGML_STATUS_SUCCESS;
}

static const ggml_backend_i ggml_backend_rknpu_i = {
    /* .get_name            = */ ggml_backend_rknpu_get_name,
    /* .free                = */ ggml_backend_rknpu_free,
    /* .set_tensor_async    = */ nullptr,
    /* .get_tensor_async    = */ nullptr,
    /* .set_tensor_2d_async = */ nullptr,
    /* .get_tensor_2d_async = */ nullptr,
    /* .cpy_tensor_async    = */ nullptr,
    /* .synchronize         = */ nullptr,
    /* .graph_plan_create   = */ nullptr,
    /* .graph_plan_free     = */ nullptr,
    /* .graph_plan_update   = */ nullptr,
    /* .graph_plan_compute  = */ nullptr,
    /* .graph_compute       = */ ggml_backend_rknpu_graph_compute,
    /* .event_record        = */ nullptr,
    /* .event_wait          = */ nullptr,
    /* .graph_optimize      = */ nullptr,
};

static ggml_guid_t ggml_backend_rknpu_guid(void) {
    static ggml_guid guid = { 0x72, 0x6b, 0x6e, 0x70, 0x75, 0x2d, 0x72, 0x6b,
                              0x33, 0x35, 0x38, 0x38, 0x2d, 0x6e, 0x70, 0x75 };
    return &guid;
}

bool ggml_backend_is_rknpu(ggml_backend_t backend) {
    return backend != nullptr && ggml_guid_matches(backend->guid, ggml_backend_rknpu_guid());
}

// device

static const char * ggml_backend_rknpu_device_get_name(ggml_backend_dev_t dev) {
    GGML_UNUSED(dev);
    return GGML_RKNPU_NAME;
}

static const char * ggml_backend_rknpu_device_get_description(ggml_backend_dev_t dev) {
    auto * ctx = (ggml_rknpu_device_context *) dev->context;
    return ctx->description.c_str();
}

static void ggml_backend_rknpu_device_get_memory(ggml_backend_dev_t dev, size_t * free, size_t * total) {
    GGML_UNUSED(dev);
    // the NPU works in system memory: report what the system has
    const long page  = sysconf(_SC_PAGESIZE);
    const long avail = sysconf(_SC_AVPHYS_PAGES);
    const long phys  = sysconf(_SC_PHYS_PAGES);
    *free            = page > 0 && avail > 0 ? (size_t) page * (size_t) avail : 0;
    *total           = page > 0 && phys > 0 ? (size_t) page * (size_t) phys : 0;
}

static enum ggml_backend_dev_type ggml_backend_rknpu_device_get_type(ggml_backend_dev_t dev) {
    GGML_UNUSED(dev);
    return GGML_BACKEND_DEVICE_TYPE_ACCEL;
}

static void ggml_backend_rknpu_device_get_props(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    props->name        = ggml_backend_rknpu_device_get_name(dev);
    props->description = ggml_backend_rknpu_device_get_description(dev);
    props->type        = ggml_backend_rknpu_device_get_type(dev);
    ggml_backend_rknpu_device_get_memory(dev, &props->memory_free, &props->memory_total);
    props->caps = {
        /* .async                = */ false,
        /* .host_buffer          = */ false,
        /* .buffer_from_host_ptr = */ false,
        /* .events               = */ false,
        /* .mmap_support         = */ false,
    };
}

static ggml_backend_t ggml_backend_rknpu_device_init_backend(ggml_backend_dev_t dev, const char * params) {
    GGML_UNUSED(params);
    auto * dev_ctx = (ggml_rknpu_device_context *) dev->context;
    auto * ctx     = new ggml_rknpu_backend_context;
    ctx->dev       = dev_ctx->dev;
    const char * b = getenv("RKNPU_GGML_BATCH");
    ctx->batch     = b == nullptr || strcmp(b, "0") != 0;
    return new ggml_backend{
        /* .guid    = */ ggml_backend_rknpu_guid(),
        /* .iface   = */ ggml_backend_rknpu_i,
        /* .device  = */ dev,
        /* .context = */ ctx,
    };
}

static ggml_backend_buffer_type_t ggml_backend_rknpu_device_get_buffer_type(ggml_backend_dev_t dev) {
    return ggml_backend_rknpu_buffer_type(dev);
}

static bool ggml_backend_rknpu_device_supports_op(ggml_backend_dev_t dev, const ggml_tensor * op) {
    auto * ctx = (ggml_rknpu_device_context *) dev->context;
    if (ggml_rknpu_is_view_op(op->op)) {
        return true;
    }
    return op->op == GGML_OP_MUL_MAT && ggml_rknpu_supports_mul_mat(ctx->dev, op);
}

static bool ggml_backend_rknpu_device_supports_buft(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft) {
    return buft == ggml_backend_rknpu_buffer_type(dev);
}

static const ggml_backend_device_i ggml_backend_rknpu_device_i = {
    /* .get_name             = */ ggml_backend_rknpu_device_get_name,
    /* .get_description      = */ ggml_backend_rknpu_device_get_description,
    /* .get_memory           = */ ggml_backend_rknpu_device_get_memory,
    /* .get_type             = */ ggml_backend_rknpu_device_get_type,
    /* .get_props            = */ ggml_backend_rknpu_device_get_props,
    /* .init_backend         = */ ggml_backend_rknpu_device_init_backend,
    /* .get_buffer_type      = */ ggml_backend_rknpu_device_get_buffer_type,
    /* .get_host_buffer_type = */ nullptr,
    /* .buffer_from_host_ptr = */ nullptr,
    /* .supports_op          = */ ggml_backend_rknpu_device_supports_op,
    /* .supports_buft        = */ ggml_backend_rknpu_device_supports_buft,
    /* .offload_op           = */ nullptr,
    /* .event_new            = */ nullptr,
    /* .event_free           = */ nullptr,
    /* .event_synchronize    = */ nullptr,
};

// registry

struct ggml_backend_rknpu_reg_context {
    ggml_rknpu_device_context dev_ctx;
    ggml_backend_device       device;
    size_t                    n_devices = 0;
};

static const char * ggml_backend_rknpu_reg_get_name(ggml_backend_reg_t reg) {
    GGML_UNUSED(reg);
    return GGML_RKNPU_NAME;
}

static size_t ggml_backend_rknpu_reg_get_device_count(ggml_backend_reg_t reg) {
    auto * ctx = (ggml_backend_rknpu_reg_context *) reg->context;
    return ctx->n_devices;
}

static ggml_backend_dev_t ggml_backend_rknpu_reg_get_device(ggml_backend_reg_t reg, size_t index) {
    auto * ctx = (ggml_backend_rknpu_reg_context *) reg->context;
    GGML_ASSERT(index < ctx->n_devices);
    return &ctx->device;
}

static void * ggml_backend_rknpu_reg_get_proc_address(ggml_backend_reg_t reg, const char * name) {
    GGML_UNUSED(reg);
    GGML_UNUSED(name);
    return nullptr;
}

static const ggml_backend_reg_i ggml_backend_rknpu_reg_i = {
    /* .get_name         = */ ggml_backend_rknpu_reg_get_name,
    /* .get_device_count = */ ggml_backend_rknpu_reg_get_device_count,
    /* .get_device       = */ ggml_backend_rknpu_reg_get_device,
    /* .get_proc_address = */ ggml_backend_rknpu_reg_get_proc_address,
};

ggml_backend_reg_t ggml_backend_rknpu_reg(void) {
    static ggml_backend_rknpu_reg_context ctx;
    static ggml_backend_reg               reg = {
        /* .api_version = */ GGML_BACKEND_API_VERSION,
        /* .iface       = */ ggml_backend_rknpu_reg_i,
        /* .context     = */ &ctx,
    };
    static std::once_flag once;
    std::call_once(once, [] {
        rknpu_device * dev = nullptr;
        if (rknpu_open(nullptr, &dev) != 0) {
            GGML_LOG_WARN("%s: no NPU: %s (RKNPU_DEVICE=emu selects the emulated one); no device registered\n",
                          __func__, rknpu_last_error());
            return;
        }
        const char * spec       = getenv("RKNPU_DEVICE");
        ctx.dev_ctx.dev         = dev;
        ctx.dev_ctx.description = spec != nullptr && strncmp(spec, "emu", 3) == 0 ?
                                      std::string("RK3588 NPU, emulated (RKNPU_DEVICE=") + spec + ")" :
                                      std::string("RK3588 NPU");
        ctx.device              = {
            /* .iface   = */ ggml_backend_rknpu_device_i,
            /* .reg     = */ &reg,
            /* .context = */ &ctx.dev_ctx,
        };
        ctx.n_devices = 1;
    });
    return &reg;
}

GGML_BACKEND_DL_IMPL(ggml_backend_rknpu_reg)

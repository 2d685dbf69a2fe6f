// ggml-rknpu: a ggml backend for the Rockchip RK3588 NPU on rknpu-driver's C API.
//
// Built as a dynamically loaded ggml backend (libggml-rknpu.so, loaded with
// GGML_BACKEND_PATH or ggml_backend_load); see docs/ggml.md.

#pragma once

#include "ggml-backend.h"
#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GGML_RKNPU_NAME "RKNPU"

// the backend registry: one device "RKNPU" when an NPU (or RKNPU_DEVICE=emu) opens, none otherwise
GGML_BACKEND_API ggml_backend_reg_t ggml_backend_rknpu_reg(void);

// whether a backend is this one
GGML_BACKEND_API bool ggml_backend_is_rknpu(ggml_backend_t backend);

#ifdef __cplusplus
}
#endif

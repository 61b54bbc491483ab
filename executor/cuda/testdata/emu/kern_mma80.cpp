// kern_mma80.cpp: mma.cu as gen.sh builds it for sm_80 (FP8 decoded
// through the shared table), for the host, and its kernel table.
#include "emu.h"

#define ck_linear_mma_bf16 ck_linear_mma_bf16_sm80
#define ck_linear_mma_f16 ck_linear_mma_f16_sm80
#include "../../kernels/mma.cu"
#undef ck_linear_mma_bf16
#undef ck_linear_mma_f16

namespace ckemu {

const Kernel mma80_kernels[] = {
    kernel("ck_linear_mma_bf16", ck_linear_mma_bf16_sm80),
    kernel("ck_linear_mma_f16", ck_linear_mma_f16_sm80),
    Kernel{nullptr, 0, nullptr, nullptr, nullptr},
};

}  // namespace ckemu

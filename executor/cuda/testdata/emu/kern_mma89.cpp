// kern_mma89.cpp: mma.cu as gen.sh builds it for sm_89 and sm_90
// (CKPT_FP8_CVT: FP8 decoded by the conversion instruction), for the host,
// and its kernel table.
#include "emu.h"

#define CKPT_FP8_CVT
#define ck_linear_mma_bf16 ck_linear_mma_bf16_sm89
#define ck_linear_mma_f16 ck_linear_mma_f16_sm89
#include "../../kernels/mma.cu"
#undef ck_linear_mma_bf16
#undef ck_linear_mma_f16

namespace ckemu {

const Kernel mma89_kernels[] = {
    kernel("ck_linear_mma_bf16", ck_linear_mma_bf16_sm89),
    kernel("ck_linear_mma_f16", ck_linear_mma_f16_sm89),
    Kernel{nullptr, 0, nullptr, nullptr, nullptr},
};

}  // namespace ckemu

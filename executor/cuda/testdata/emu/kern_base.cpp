// kern_base.cpp: base.cu built for the host, and its kernel table.
#include "emu.h"

#include "../../kernels/base.cu"

namespace ckemu {

const Kernel base_kernels[] = {
    kernel("ck_dequant", ck_dequant),
    kernel("ck_convert", ck_convert),
    kernel("ck_add", ck_add),
    kernel("ck_gelu", ck_gelu),
    kernel("ck_silu", ck_silu),
    kernel("ck_rmsnorm", ck_rmsnorm),
    kernel("ck_count_nonfinite", ck_count_nonfinite),
    kernel("ck_linear", ck_linear),
    Kernel{nullptr, 0, nullptr, nullptr, nullptr},
};

}  // namespace ckemu

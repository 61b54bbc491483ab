// fiber.h: the grid runner of fiber.cpp, for driver.cpp.
#ifndef CKPT_EMU_FIBER_H
#define CKPT_EMU_FIBER_H

#include <string>

#include "emu.h"

namespace ckemu {

// run_grid runs kernel k over the grid with parameter pointers params; it
// returns "" or why the launch failed.
std::string run_grid(const Kernel* k, void** params, dim3 grid, dim3 block);

}  // namespace ckemu

#endif

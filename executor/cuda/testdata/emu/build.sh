#!/bin/sh
# build.sh DIR [NAME]: builds the CUDA driver emulator as DIR/NAME (default
# libcuda.so.1, also its soname) with the host C++ compiler ($CXX, else c++,
# g++ or clang++). DIR is created when it does not exist (mkdir -p); a
# relative DIR is taken from the current folder. emu_linux_test.go builds
# it under another name (a library loaded with the soname libcuda.so.1
# would be what a later dlopen("libcuda.so.1") returns in that process,
# even on a GPU machine).
# As libcuda.so.1 with DIR on LD_LIBRARY_PATH, programs that start the
# CUDA executor (ckpt devices, ckpt run-mlp, examples/mlp, bench/gpu) run
# on it, and say so: the device is named "ckpt emulated GPU". Its device:
# compute capability $CKPT_EMU_CC (default 89), $CKPT_EMU_MEM_MIB MiB
# (default 2048), a CUDA 12.4 driver. $CXXFLAGS are added (-DCKEMU_UCONTEXT:
# switch fibers with ucontext on x86-64 too, as on other processors).
set -eu
if [ $# -lt 1 ] || [ -z "$1" ]; then
	echo "usage: build.sh DIR [NAME]" >&2
	exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$(dirname "$0")"
name=${2:-libcuda.so.1}
cxx="${CXX:-}"
if [ -z "$cxx" ]; then
	for c in c++ g++ clang++; do
		if command -v "$c" >/dev/null 2>&1; then
			cxx=$c
			break
		fi
	done
fi
if [ -z "$cxx" ]; then
	echo "build.sh: no C++ compiler (\$CXX, c++, g++, clang++)" >&2
	exit 1
fi
# -Bsymbolic-functions: its own calls between entry points stay its own,
# even in a process that has also loaded the real libcuda.so.1 globally.
# -ffp-contract=off: no fused multiply-add the kernels did not write.
# -fsanitize=alignment with trap: a misaligned vector load faults on a GPU;
# it traps here too.
exec "$cxx" -std=c++17 -O1 -fPIC -shared -fvisibility=hidden "-Wl,-soname,$name" -Wl,-Bsymbolic-functions \
	-ffp-contract=off -fno-fast-math -Wno-unknown-pragmas \
	-fsanitize=alignment -fsanitize-undefined-trap-on-error ${CXXFLAGS:-} \
	-o "$out/$name" driver.cpp fiber.cpp kern_base.cpp kern_mma80.cpp kern_mma89.cpp

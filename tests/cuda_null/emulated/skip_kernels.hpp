#pragma once
// KILN_EMULATED_SKIP_KERNELS=1: the emulated driver checks and counts launches without running them, and the emulated
// cuBLAS and cuDNN check and record their calls without the arithmetic, so that a program's time is kiln's host
// side, what a GPU leaves when its kernels are fast (bench/host_step.cpp). Its numbers are then garbage.
#include <cstdlib>

namespace kiln_emulated {

inline bool skip_kernels() {
  static const bool skip = [] {
    const char* v = std::getenv("KILN_EMULATED_SKIP_KERNELS");
    return v && *v && *v != '0';
  }();
  return skip;
}

}  // namespace kiln_emulated

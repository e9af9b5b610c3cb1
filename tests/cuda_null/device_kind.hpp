#pragma once
// Whether the CUDA libraries a device test loads are the emulated ones (tests/cuda_null/emulated, named by
// KILN_CUDA_DRIVER_LIBRARY, KILN_CUBLAS_LIBRARY and KILN_CUDNN_LIBRARY in tests/meson.build) or a GPU's (tests/gpu/run.sh): some checks
// read the emulator's records, some sizes are too slow for it.
#include <cstdlib>
#include <string>

namespace kiln::test {

inline bool emulated_library(const char* variable) {
  const char* path = std::getenv(variable);
  return path && std::string(path).find("emulated") != std::string::npos;
}
inline bool emulated_driver() { return emulated_library("KILN_CUDA_DRIVER_LIBRARY"); }
inline bool emulated_cublas() { return emulated_library("KILN_CUBLAS_LIBRARY"); }
inline bool emulated_cudnn() { return emulated_library("KILN_CUDNN_LIBRARY"); }

}  // namespace kiln::test

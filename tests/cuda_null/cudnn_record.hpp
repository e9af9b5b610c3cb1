#pragma once
// cuDNN in the device tests: its switches set for a scope, and what the emulated cuDNN (tests/cuda_null/emulated/
// cudnn.cpp) recorded, its execution calls and the last one as text. A GPU's cuDNN records nothing: checks that read
// the record run only where emulated_cudnn() (device_kind.hpp).
#include <string>

#include "kiln/cuda/cudnn.hpp"

#include "device_kind.hpp"

namespace kiln::test {

inline long cudnn_calls() { return cuda::Cudnn::get().symbol<long (*)()>("kiln_emulated_cudnn_calls")(); }
inline std::string cudnn_last_call() {
  return cuda::Cudnn::get().symbol<const char* (*)()>("kiln_emulated_cudnn_last_call")();
}
inline std::string cudnn_last_find() {
  return cuda::Cudnn::get().symbol<const char* (*)()>("kiln_emulated_cudnn_last_find")();
}

// cuda::cudnn_enabled, cudnn_deterministic, cudnn_allow_tf32 and cudnn_benchmark for a scope, restored at its end.
class CudnnScope {
 public:
  explicit CudnnScope(bool enabled, bool deterministic = false, bool allow_tf32 = false, bool benchmark = false)
      : enabled_(cuda::cudnn_is_enabled()),
        deterministic_(cuda::cudnn_is_deterministic()),
        allow_tf32_(cuda::cudnn_allows_tf32()),
        benchmark_(cuda::cudnn_benchmark_enabled()) {
    cuda::cudnn_enabled(enabled);
    cuda::cudnn_deterministic(deterministic);
    cuda::cudnn_allow_tf32(allow_tf32);
    cuda::cudnn_benchmark(benchmark);
  }
  ~CudnnScope() {
    cuda::cudnn_enabled(enabled_);
    cuda::cudnn_deterministic(deterministic_);
    cuda::cudnn_allow_tf32(allow_tf32_);
    cuda::cudnn_benchmark(benchmark_);
  }
  CudnnScope(const CudnnScope&) = delete;
  CudnnScope& operator=(const CudnnScope&) = delete;

 private:
  bool enabled_, deterministic_, allow_tf32_, benchmark_;
};

}  // namespace kiln::test

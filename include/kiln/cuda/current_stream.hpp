#pragma once
// The stream that kiln's kernel launches, cuBLAS calls and CUDA tensor allocations use on a device, per thread
// (torch's current stream): the default stream (0) until a CUDAStreamGuard or setCurrentCUDAStream
// (cuda/stream.hpp) names another.
#include <cstdint>
#include <map>

namespace kiln::cuda {

// A CUDA stream's handle as kiln keys it (0 = the default stream).
using StreamId = uintptr_t;

inline StreamId& current_stream_of(int device) {
  thread_local std::map<int, StreamId> current;
  return current[device];
}

}  // namespace kiln::cuda

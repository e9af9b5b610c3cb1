#pragma once
// kiln's CUDA backend (optional; <kiln/kiln.hpp> never includes it). Everything is loaded at run time, so a
// program that includes this header builds without the CUDA Toolkit's headers and runs on machines without
// CUDA: is_available() is false there, and asking for the driver or NVRTC throws CudaUnavailableError.
//
// What is here so far (issue 5, docs/cuda.md): CUDA source generated from the op table for any expression
// and its fused backward (codegen.hpp, descriptor.hpp), NVRTC compilation to cubins (nvrtc.hpp), the kernel
// cache in memory and on disk (kernel_cache.hpp), the caching allocator (allocator.hpp), the driver's device
// queries (driver.hpp), device memory and kernel launches through the driver (runtime.hpp), and CUDA tensors'
// memory: t.cuda(), t.to(device), t.cpu() (tensor_hooks.hpp). Ops, autograd and training on CUDA tensors need the
// build-wide -DKILN_WITH_CUDA, with which <kiln/kiln.hpp> includes this header and the rest of the backend
// (docs/cuda.md).
#include "kiln/cuda/allocator.hpp"
#include "kiln/cuda/codegen.hpp"
#include "kiln/cuda/descriptor.hpp"
#include "kiln/cuda/driver.hpp"
#include "kiln/cuda/kernel_cache.hpp"
#include "kiln/cuda/nvrtc.hpp"
#include "kiln/cuda/runtime.hpp"
#include "kiln/cuda/stream.hpp"
#include "kiln/cuda/tensor_hooks.hpp"

#pragma once
// kiln: header-only C++20 tensors whose elementwise work is fused into one SIMD pass.
// This umbrella is CPU-only; CUDA, attention and distributed training are opt-in headers.
#include "kiln/autograd/function.hpp"
#include "kiln/autograd/gradcheck.hpp"
#include "kiln/core/config.hpp"
#include "kiln/cpu/simd_target.hpp"
#include "kiln/tensor/any_tensor.hpp"
#include "kiln/tensor/device_copy.hpp"
#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/gather.hpp"
#include "kiln/tensor/indexing.hpp"
#include "kiln/tensor/join.hpp"
#include "kiln/tensor/print.hpp"
#include "kiln/tensor/random.hpp"
#include "kiln/tensor/reduce.hpp"
#include "kiln/tensor/softmax.hpp"
#include "kiln/tensor/tensor.hpp"
#include "kiln/tensor/views.hpp"
#ifdef KILN_WITH_CUDA  // (a build-wide switch: cuda/evaluate.hpp)
#include "kiln/cuda.hpp"
#include "kiln/cuda/autograd.hpp"
#include "kiln/cuda/evaluate.hpp"
#include "kiln/cuda/indexing.hpp"
#endif

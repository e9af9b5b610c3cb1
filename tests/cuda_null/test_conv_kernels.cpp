// conv2d's CUDA kernels (cuda/im2col.hpp: im2col and col2im) compile with NVRTC for the GPUs kiln targets; what
// they compute is checked against the CPU's convolution on the emulated device (test_emulated_autograd.cpp).
#include <doctest/doctest.h>

#include "host_shim.hpp"
#include "kiln/cuda/im2col.hpp"
#include "kiln/cuda/nvrtc.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_null_conv_kernels {

using namespace kiln;
using namespace kiln::test;

template <class T>
void add_conv_kernels(ShimSuite& s) {
  for (bool index32 : {true, false}) {
    s.add_kernel(cuda::im2col_kernel<T>(index32, s.entry("im2col")));
    s.add_kernel(cuda::col2im_kernel<T>(index32, s.entry("col2im")));
  }
}

TEST_CASE("conv2d's im2col and col2im kernels compile with NVRTC for sm_80 and sm_90 without register spills") {
  ShimSuite s;
  add_conv_kernels<float>(s);
  add_conv_kernels<double>(s);
  add_conv_kernels<bfloat16>(s);
  add_conv_kernels<float16>(s);
  s.check_nvrtc({80, 90}, "conv_kernels.cu");
}

}  // namespace test_cuda_null_conv_kernels

// Compile-time budget: a depth-40 chain of elementwise ops, one fused expression (docs/performance.md).
#include <cstdio>

#include "chain.hpp"

int main() {
  kiln::Tensor<float> x = kiln::linspace(-1, 1, 10000);
  kiln::Tensor<float> out = kiln_budget::chain<40>(x * 1.0f, x);
  std::printf("%g %s\n", double(out[17].item()), kiln::simd_target());
  return 0;
}

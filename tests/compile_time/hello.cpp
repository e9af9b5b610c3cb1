// Compile-time budget, hello: the umbrella header and one fused expression (docs/performance.md).
#include <kiln/kiln.hpp>

#include <cstdio>

int main() {
  kiln::Tensor<float> x = kiln::arange(0, 1000), y = kiln::ones<float>({1000}), z = kiln::zeros<float>({1000});
  kiln::Tensor<float> out = 2.0f * x + 3.0f * y + z;
  std::printf("%g %s\n", double(out[10].item()), kiln::simd_target());
  return 0;
}

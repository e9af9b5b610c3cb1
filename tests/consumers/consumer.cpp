// A program that uses an installed (or subproject) kiln: one fused expression, its sum checked against a
// plain loop, and the SIMD target that the consumer's own flags gave. scripts/test_consumers.sh builds it
// through Meson (subproject), CMake (find_package) and a Makefile (pkg-config) and checks what it prints.
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdio>

int main() {
  const int64_t n = 1000;
  kiln::Tensor<float> x = kiln::arange(n), y = kiln::full<float>({n}, 0.5f), z = kiln::ones<float>({n});
  kiln::Tensor<float> out = 2.0f * x + 3.0f * y - kiln::exp(x * 0.0f) + kiln::tanh(z * 0.0f);  // one pass
  double sum = 0, expected = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += out.data_ptr()[i];
    expected += 2.0 * double(i) + 1.5 - 1.0;
  }
  std::printf("kiln %s consumer: sum %.1f expected %.1f\n", kiln::version(), sum, expected);
  std::printf("simd_target %s\n", kiln::simd_target());
  return std::abs(sum - expected) <= 1e-6 * expected ? 0 : 1;
}

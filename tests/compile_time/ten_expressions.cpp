// Compile-time budget: ten different fused expressions in one translation unit (docs/performance.md).
#include <kiln/kiln.hpp>

#include <cstdio>

int main() {
  using kiln::Tensor;
  Tensor<float> x = kiln::linspace(-2, 2, 4096), y = kiln::linspace(0.5, 3, 4096), z = kiln::ones<float>({4096});
  Tensor<float> b = kiln::linspace(-1, 1, 64).reshape({64, 1});
  const float a = 1.5f, c = -0.25f;
  double acc = 0;
  auto use = [&acc](const auto& t) { acc += double(t.reshape({-1})[3].item()); };

  Tensor<float> e1 = a * x + c * y + z;
  Tensor<float> e2 = kiln::tanh(x) * kiln::exp(-y * y) + z;
  Tensor<float> e3 = kiln::sigmoid(x) * y - kiln::relu(z - x);
  Tensor<float> e4 = kiln::sqrt(y) / (kiln::abs(x) + 1.0f) + kiln::log(y);
  Tensor<float> e5 = kiln::silu(x) + kiln::gelu(y) * 0.5f;
  Tensor<float> e6 = kiln::where(x > 0.0f, kiln::sin(x), kiln::cos(y));
  Tensor<float> e7 = kiln::clamp(x * y, -1.0f, 1.0f) + kiln::square(z);
  Tensor<float> e8 = kiln::maximum(x, y) - kiln::minimum(x, z) * kiln::expm1(x / 4.0f);
  Tensor<float> e9 = kiln::pow(y, 1.5f) + kiln::log1p(kiln::abs(x)) - kiln::rsqrt(y);
  Tensor<float> e10 = x.reshape({64, 64}) * b + kiln::softplus(x.reshape({64, 64}));
  use(e1), use(e2), use(e3), use(e4), use(e5), use(e6), use(e7), use(e8), use(e9), use(e10);
  std::printf("%g %s\n", acc, kiln::simd_target());
  return 0;
}

// Compile-time budget: a depth-40 chain of elementwise ops, one fused expression (docs/performance.md).
#include <kiln/kiln.hpp>

#include <cstdio>

namespace {
// Level N wraps the expression in one more op, cycling through four kinds of node.
template <int N>
auto chain(const auto& e, const kiln::Tensor<float>& x) {
  if constexpr (N == 0) {
    return e;
  } else if constexpr (N % 4 == 0) {
    return chain<N - 1>(kiln::sin(e), x);
  } else if constexpr (N % 4 == 1) {
    return chain<N - 1>(e * 0.75f, x);
  } else if constexpr (N % 4 == 2) {
    return chain<N - 1>(e + x, x);
  } else {
    return chain<N - 1>(kiln::tanh(e), x);
  }
}
}  // namespace

int main() {
  kiln::Tensor<float> x = kiln::linspace(-1, 1, 10000);
  kiln::Tensor<float> out = chain<40>(x * 1.0f, x);
  std::printf("%g %s\n", double(out[17].item()), kiln::simd_target());
  return 0;
}

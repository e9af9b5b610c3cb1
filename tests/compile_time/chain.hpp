// The depth-N chain of the compile-time budget (chain40.cpp, backward_chain.cpp): level N wraps the
// expression in one more op, cycling through four kinds of node.
#pragma once
#include <kiln/kiln.hpp>

namespace kiln_budget {
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
}  // namespace kiln_budget

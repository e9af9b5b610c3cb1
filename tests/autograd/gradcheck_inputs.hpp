#pragma once
// Inputs for gradcheck-based tests: reproducible float64 normal samples, one generator per seed.
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln::testing {

inline Tensor<double> sample(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor<double>(randn<double>(shape, &gen));
}
using Inputs = std::vector<Tensor<double>>;

}  // namespace kiln::testing

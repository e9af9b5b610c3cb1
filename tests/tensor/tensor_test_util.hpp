#pragma once
// Helpers shared by the tensor tests: seeded normal inputs and values read back as doubles.
#include <cstdint>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln::test {

// A tensor of normal(0, scale) values from Philox seed `seed`.
template <Dtype T = float>
Tensor<T> normal_tensor(const Shape& s, uint64_t seed, double scale = 1.0) {
  Tensor<T> t = empty<T>(s);
  Generator gen(seed);
  if (t.numel() > 0) fill_normal(gen, t.data_ptr(), t.numel(), 0.0, scale);
  return t;
}

template <class T>
std::vector<double> values_of(const Tensor<T>& t) {
  std::vector<double> out;
  for (const auto& v : t.to_vector()) out.push_back(double(compute_t<T>(v)));
  return out;
}

}  // namespace kiln::test

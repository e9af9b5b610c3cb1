#pragma once
// Results of generated kernels against the CPU's: within tol * (1 + |want|) element by element (equal infinities
// match), the first five misses reported with their index. Relative::kLargest scales the absolute part by the
// largest |want| instead of 1: for results that are sums with cancellation (a convolution's input gradient), where
// an element's own size says nothing of its rounding, which follows the size of the terms.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln::test {

template <class T>
std::vector<double> values_of(const Tensor<T>& t) {
  std::vector<double> out;
  for (const T& x : t.contiguous().to_vector()) out.push_back(double(x));
  return out;
}

enum class Relative { kElement, kLargest };

inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what,
                         Relative relative = Relative::kElement) {
  REQUIRE(got.size() == want.size());
  double scale = 1;
  if (relative == Relative::kLargest)
    for (double w : want) scale = std::isfinite(w) ? std::max(scale, std::abs(w)) : scale;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if ((std::isinf(want[i]) && got[i] == want[i]) || std::abs(got[i] - want[i]) <= tol * (scale + std::abs(want[i])))
      continue;
    if (++bad <= 5) {
      INFO(what, ": element ", i, " is ", got[i], ", the CPU gives ", want[i]);
      CHECK(false);
    }
  }
  CHECK(bad == 0);
}

template <class T>
void expect_close(const Tensor<T>& got, const Tensor<T>& want, double tol, const std::string& what,
                  Relative relative = Relative::kElement) {
  expect_close(values_of(got), values_of(want), tol, what, relative);
}

}  // namespace kiln::test

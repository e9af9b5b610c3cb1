#pragma once
// Results of generated kernels against the CPU's: within tol * (1 + |want|) element by element (equal infinities
// match), the first five misses reported with their index.
#include <doctest/doctest.h>

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

inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if ((std::isinf(want[i]) && got[i] == want[i]) || std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]))) continue;
    if (++bad <= 5) {
      INFO(what, ": element ", i, " is ", got[i], ", the CPU gives ", want[i]);
      CHECK(false);
    }
  }
  CHECK(bad == 0);
}

template <class T>
void expect_close(const Tensor<T>& got, const Tensor<T>& want, double tol, const std::string& what) {
  expect_close(values_of(got), values_of(want), tol, what);
}

}  // namespace kiln::test

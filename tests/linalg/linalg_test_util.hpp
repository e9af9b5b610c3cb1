#pragma once
// References for the linalg tests that do not go through Eigen: matrices read out of tensors as row-major
// std::vector<double>, hand-written products and transposes, and seeded inputs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../tensor/tensor_test_util.hpp"
#include "kiln/linalg.hpp"

namespace kiln::test::la {

// A row-major rows x cols matrix.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  double operator()(int64_t i, int64_t j) const { return v[size_t(i * cols + j)]; }
  double& operator()(int64_t i, int64_t j) { return v[size_t(i * cols + j)]; }
};

inline Mat zeros(int64_t rows, int64_t cols) { return {rows, cols, std::vector<double>(size_t(rows * cols), 0.0)}; }
inline Mat identity(int64_t n) {
  Mat m = zeros(n, n);
  for (int64_t i = 0; i < n; ++i) m(i, i) = 1;
  return m;
}

// Matrix `index` of a [*, rows, cols] tensor (the batch dims flattened).
template <class T>
Mat matrix(const Tensor<T>& t, int64_t index = 0) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const std::vector<double> all = values_of(t);
  Mat m{rows, cols, {}};
  m.v.assign(all.begin() + index * rows * cols, all.begin() + (index + 1) * rows * cols);
  return m;
}

inline Mat mul(const Mat& a, const Mat& b) {
  Mat c = zeros(a.rows, b.cols);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t k = 0; k < a.cols; ++k)
      for (int64_t j = 0; j < b.cols; ++j) c(i, j) += a(i, k) * b(k, j);
  return c;
}

inline Mat transpose(const Mat& a) {
  Mat t = zeros(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  return t;
}

inline double max_diff(const Mat& a, const Mat& b) {
  if (a.rows != b.rows || a.cols != b.cols) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < a.v.size(); ++i) d = std::max(d, std::abs(a.v[i] - b.v[i]));
  return d;
}

// A tensor of the given shape holding `values` (row-major).
template <class T = double>
Tensor<T> tensor_of(const Shape& s, const std::vector<double>& values) {
  Tensor<T> t = empty<T>(s);
  for (size_t i = 0; i < values.size(); ++i) t.data_ptr()[i] = T(values[i]);
  return t;
}

// Symmetric positive-definite matrices X X^T + n I, computed by hand from normal X.
template <class T = double>
Tensor<T> spd(const Shape& s, uint64_t seed) {
  const Tensor<double> x = normal_tensor<double>(s, seed);
  const int64_t n = s[s.size() - 1], count = x.numel() / (n * n);
  std::vector<double> out;
  for (int64_t b = 0; b < count; ++b) {
    const Mat m = matrix(x, b);
    Mat a = mul(m, transpose(m));
    for (int64_t i = 0; i < n; ++i) a(i, i) += double(n);
    out.insert(out.end(), a.v.begin(), a.v.end());
  }
  return tensor_of<T>(s, out);
}

}  // namespace kiln::test::la

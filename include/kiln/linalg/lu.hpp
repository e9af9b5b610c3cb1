#pragma once
// The LU factorization (partial pivoting) under solve, inv, det and slogdet, and its singularity test:
// an exactly zero pivot, as LAPACK's getrf reports it (and torch with it).
#include "kiln/linalg/common.hpp"


namespace kiln::linalg::detail {

template <class T>
using LU = Eigen::PartialPivLU<Matrix<T>>;

// The 1-based index of the first zero on U's diagonal, or 0 when the matrix is nonsingular.
template <class T>
int64_t zero_pivot(const LU<T>& lu) {
  const auto& m = lu.matrixLU();
  for (Eigen::Index k = 0; k < m.rows(); ++k)
    if (m(k, k) == T(0)) return k + 1;
  return 0;
}

}  // namespace kiln::linalg::detail

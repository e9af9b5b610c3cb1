#pragma once
// Eigen's dense decompositions (LU, Cholesky, QR, SVD, Eigenvalues) for kiln::linalg, included once with the
// GCC 12 false positives on Eigen's AVX-512 code silenced around the include only (as kiln/cpu/gemm.hpp does
// for Eigen/Core), so kiln's and the user's code keep every warning.
#include "kiln/cpu/gemm.hpp"  // Eigen/Core

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Cholesky>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <Eigen/QR>
#include <Eigen/SVD>
#pragma GCC diagnostic pop

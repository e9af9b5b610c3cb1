#pragma once
// kiln::linalg: torch.linalg's decompositions and solvers through Eigen, on float and double tensors,
// batched over leading dims (docs/linalg.md). Opt-in, not part of <kiln/kiln.hpp>: Eigen's decompositions
// add seconds to a translation unit's compile time. Products (matmul, mm, bmm) are in <kiln/tensor/linalg.hpp>.
#include "kiln/linalg/cholesky.hpp"
#include "kiln/linalg/det.hpp"
#include "kiln/linalg/eigh.hpp"
#include "kiln/linalg/lstsq.hpp"
#include "kiln/linalg/norm.hpp"
#include "kiln/linalg/qr.hpp"
#include "kiln/linalg/solve.hpp"
#include "kiln/linalg/svd.hpp"
#include "kiln/tensor/linalg.hpp"

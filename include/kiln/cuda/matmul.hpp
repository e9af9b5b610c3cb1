#pragma once
// matmul, mm, bmm, mv and dot of CUDA tensors through cuBLAS (cuda/cublas.hpp): tensor/linalg.hpp's batched_matmul
// calls cuda_batched_matmul for a product on a device in builds with KILN_WITH_CUDA, and includes this header there.
//
// cuBLAS is column-major and kiln row-major: the row-major c = a b is the column-major c^T = b^T a^T, so b goes as
// cuBLAS's first operand and a as its second, m = N and n = M. A matrix with a unit stride in either of its dims
// goes as it is (op N or T, its other stride the leading dim), so transposes and row or column slices cost no copy;
// any other matrix (no unit stride, or overlapping rows) is first made contiguous on the device. Broadcast batch
// dims are stride 0 in the strided-batched call; batch dims that do not merge loop over calls (ProductLayout).
#include <algorithm>
#include <chrono>
#include <climits>
#include <optional>

#include "kiln/cuda.hpp"
#include "kiln/cuda/cublas.hpp"
#include "kiln/cuda/evaluate.hpp"
#include "kiln/tensor/linalg.hpp"

namespace kiln::detail {

// How cuBLAS reads a p x q column-major operand whose element (i, j) is at i * si + j * sj (a size-1 dim's stride
// does not matter): as the matrix itself (op N, leading dim sj) when si is 1, as the transpose of a q x p matrix
// (op T, leading dim si) when sj is 1; nothing when neither fits cuBLAS's rule ld >= max(1, rows) or int.
struct BlasOperand {
  cuda::blas::Operation op;
  int ld;
};
inline std::optional<BlasOperand> blas_operand(int64_t p, int64_t q, int64_t si, int64_t sj) {
  const auto fits = [](int64_t ld, int64_t rows) { return ld >= std::max<int64_t>(1, rows) && ld <= INT_MAX; };
  if (p == 1 || si == 1) {
    const int64_t ld = q == 1 ? std::max<int64_t>(1, p) : sj;
    if (fits(ld, p)) return BlasOperand{cuda::blas::kNoTrans, int(ld)};
  }
  if (q == 1 || sj == 1) {
    const int64_t ld = p == 1 ? std::max<int64_t>(1, q) : si;
    if (fits(ld, q)) return BlasOperand{cuda::blas::kTrans, int(ld)};
  }
  return std::nullopt;
}

// cuBLAS's reading of b (its first operand, b^T: N x K) and of a (its second, a^T: K x M) under layout p.
inline std::optional<BlasOperand> blas_b(const ProductLayout& p) { return blas_operand(p.N, p.K, p.b_cs, p.b_rs); }
inline std::optional<BlasOperand> blas_a(const ProductLayout& p) { return blas_operand(p.K, p.M, p.a_cs, p.a_rs); }

template <class T>
T* device_ptr(const Tensor<T>& t) {
  return reinterpret_cast<T*>(t.impl().device_bytes());
}

template <class T>
void cuda_batched_matmul(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c, const char* op) {
  if constexpr (!is_floating_v<T>) {
    throw std::invalid_argument(cat(op, ": ", dtype_name(scalar_type_of<T>()), " tensors of shapes ", a.shape(),
                                    " and ", b.shape(), " on ", c.device().str(), ": cuBLAS has no integer product; "
                                    "convert them to float or double (.to<float>()) or multiply on the CPU (.cpu())"));
  } else {
    if (c.numel() == 0) return;
    cuda::DeviceContext& device = cuda::DeviceContext::get(c.device().index());
    if (a.size(-1) == 0) {  // K = 0: zeros, as the CPU's
      device.fill_zero(c.impl().device_bytes(), size_t(c.numel()) * sizeof(T));
      return;
    }
    // An operand cuBLAS cannot read in place is made contiguous on the device (a copy, not a node of the graph).
    Tensor<T> a1 = a, b1 = b;
    ProductLayout p = product_layout(a1.impl(), b1.impl(), c.impl());
    if (!blas_a(p) || !blas_b(p)) {
      NoGradGuard no_grad;
      if (!blas_a(p)) a1 = a.clone();
      if (!blas_b(p)) b1 = b.clone();
      p = product_layout(a1.impl(), b1.impl(), c.impl());
    }
    const std::optional<BlasOperand> ob = blas_b(p), oa = blas_a(p);
    const int64_t count = p.n ? p.shape[p.n - 1] : 1;
    check<std::invalid_argument>(oa && ob && std::max({p.M, p.N, p.K, count}) <= INT_MAX, op, ": shapes ", a.shape(),
                                 " and ", b.shape(), " on ", c.device().str(),
                                 ": cuBLAS takes sizes, leading dims and batch counts up to 2^31 - 1");
    const int in = p.n - 1;
    const long long sa = p.n ? p.st[0][in] : 0, sb = p.n ? p.st[1][in] : 0, sc = p.n ? p.st[2][in] : 0;
    const int ldc = int(std::max<int64_t>(1, p.N));  // c is contiguous: c^T is N x M with leading dim N
    cuda::Cublas& blas = cuda::Cublas::get();
    const cuda::blas::Handle handle = blas.handle(device.index());
    const T* A = device_ptr(a1);
    const T* B = device_ptr(b1);
    T* C = device_ptr(c);
    const bool profile = cuda::profiling();  // (cuda/profile.hpp)
    const auto start = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    for (int64_t o = 0; o < p.outer(); ++o) {
      const auto off = p.offsets(o);
      blas.gemm<T>(handle, ob->op, oa->op, int(p.N), int(p.M), int(p.K), B + off[1], ob->ld, sb, A + off[0], oa->ld, sa,
                   C + off[2], ldc, sc, int(count));
    }
    if (profile) {
      device.synchronize();
      cuda::KernelProfile::get().add(cat("cuBLAS ", dtype_name(scalar_type_of<T>()), " gemm ", p.M, "x", p.N, "x", p.K,
                                         count > 1 || p.outer() > 1 ? cat(" batch ", count * p.outer()) : std::string()),
                                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
}

}  // namespace kiln::detail

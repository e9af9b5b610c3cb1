#pragma once
// Matrix products with torch's names and rules: matmul (1-D, 2-D and batched with broadcast batch
// dims), mm, bmm, mv, dot. They run through kiln::cpu::gemm / gemm_batched on the tensors' own
// strides, so transposed and other views with a unit stride in one of the two matrix dims reach
// Eigen without a copy; CUDA tensors go to cuBLAS the same way in builds with KILN_WITH_CUDA
// (cuda/matmul.hpp). An expression operand is materialized first. Kept out of the elementwise
// headers: Eigen's product is the most expensive thing kiln compiles.
#include <array>

#include "kiln/core/autocast.hpp"
#include "kiln/tensor/autocast_cast.hpp"
#include "kiln/cpu/gemm.hpp"
#include "kiln/tensor/factory.hpp"  // empty (MatmulBackward)
#include "kiln/tensor/tensor.hpp"
#include "kiln/tensor/views.hpp"

namespace kiln {

namespace detail {

template <class T>
constexpr void require_gemm_dtype() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                    std::is_same_v<T, int64_t> || is_half_v<T>,
                "kiln: matmul, mm, bmm, mv and dot take float, double, int32, int64, bfloat16 or float16 tensors; "
                "convert with .to<T>()");
}

template <Operand X>
auto matmul_operand(const X& x) {
  if constexpr (TensorHandle<X>) return x;
  else return Tensor<typename X::value_type>(x);
}

[[noreturn]] inline void throw_mismatch(const char* op, const Shape& a, const Shape& b, int64_t ka, int64_t kb) {
  throw ShapeError(cat(op, ": shapes ", a, " and ", b, " cannot be multiplied (", ka, " != ", kb, ")"));
}

// The layout of c[batch..., M, N] = a[..., M, K] * b[..., K, N], where a's and b's batch dims broadcast to c's: the
// matrices' strides in elements (0 along a size-1 dim) and the batch dims with size-1 dims dropped and neighbours
// merged where all three operands allow (each operand's stride 0 along a dim it is broadcast over). One batch dim
// over a shared b, with a's rows evenly spaced across it, folds into M: one tall product. The CPU and CUDA paths
// both run their products over it.
struct ProductLayout {
  int64_t M = 0, N = 0, K = 0;
  int64_t a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0, c_rs = 0, c_cs = 0;
  int n = 0;  // batch dims left
  int64_t shape[kMaxRank] = {}, st[3][kMaxRank] = {};

  // The products over all batch dims but the innermost, which one batched call covers.
  int64_t outer() const {
    int64_t o = 1;
    for (int i = 0; i + 1 < n; ++i) o *= shape[i];
    return o;
  }
  // The element offsets of a, b and c for outer product o.
  std::array<int64_t, 3> offsets(int64_t o) const {
    std::array<int64_t, 3> off = {0, 0, 0};
    for (int i = n - 2; i >= 0; --i) {
      const int64_t idx = o % shape[i];
      o /= shape[i];
      for (int k = 0; k < 3; ++k) off[k] += idx * st[k][i];
    }
    return off;
  }
};

inline ProductLayout product_layout(const TensorImpl& a, const TensorImpl& b, const TensorImpl& c) {
  ProductLayout p;
  const Shape& cs = c.shape;
  const int nb = cs.size() - 2;
  p.M = cs[nb], p.N = cs[nb + 1], p.K = a.shape[a.shape.size() - 1];
  const Strides as = broadcast_strides(a.shape, a.strides, cs);
  const Strides bs = broadcast_strides(b.shape, b.strides, cs);
  p.a_rs = as[nb], p.a_cs = as[nb + 1], p.b_rs = bs[nb], p.b_cs = bs[nb + 1];
  p.c_rs = c.strides[nb], p.c_cs = c.strides[nb + 1];
  for (int i = 0; i < nb; ++i) {
    if (cs[i] == 1) continue;
    const int64_t s[3] = {as[i], bs[i], c.strides[i]};
    if (p.n > 0 && p.st[0][p.n - 1] == s[0] * cs[i] && p.st[1][p.n - 1] == s[1] * cs[i] &&
        p.st[2][p.n - 1] == s[2] * cs[i]) {
      p.shape[p.n - 1] *= cs[i];
      for (int k = 0; k < 3; ++k) p.st[k][p.n - 1] = s[k];
      continue;
    }
    p.shape[p.n] = cs[i];
    for (int k = 0; k < 3; ++k) p.st[k][p.n] = s[k];
    ++p.n;
  }
  if (p.n == 1 && p.st[1][0] == 0 && (p.M == 1 || p.st[0][0] == p.M * p.a_rs) && p.st[2][0] == p.M * p.c_rs) {
    if (p.M == 1) p.a_rs = p.st[0][0];
    p.M *= p.shape[0];
    p.n = 0;
  }
  return p;
}

// c = a * b (see ProductLayout; c is contiguous and freshly allocated) through Eigen's GEMM: the innermost batch dim
// goes to gemm_batched, the others loop.
template <class T>
void batched_gemm(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c) {
  if (c.numel() == 0) return;
  const ProductLayout p = product_layout(a.impl(), b.impl(), c.impl());
  const T* A = a.data_ptr();
  const T* B = b.data_ptr();
  T* C = c.data_ptr();
  if (p.n == 0) {
    cpu::gemm<T>(p.M, p.N, p.K, A, p.a_rs, p.a_cs, B, p.b_rs, p.b_cs, C, p.c_rs, p.c_cs);
    return;
  }
  const int in = p.n - 1;
  for (int64_t o = 0; o < p.outer(); ++o) {
    const auto off = p.offsets(o);
    cpu::gemm_batched<T>(p.shape[in], p.M, p.N, p.K, A + off[0], p.st[0][in], p.a_rs, p.a_cs, B + off[1], p.st[1][in],
                         p.b_rs, p.b_cs, C + off[2], p.st[2][in], p.c_rs, p.c_cs);
  }
}

#ifdef KILN_WITH_CUDA
// c = a * b on c's device through cuBLAS (cuda/matmul.hpp, included at the end of this file in such builds).
template <class T>
void cuda_batched_matmul(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c, const char* op);
#endif

// The device a product runs on: its operands' (a product across devices is refused, as torch's).
template <class T, class U>
Device product_device(const char* op, const Tensor<T>& a, const Tensor<U>& b) {
  check<std::invalid_argument>(a.device() == b.device(), op, ": operands on ", a.device().str(), " and ",
                               b.device().str(), " (shapes ", a.shape(), " and ", b.shape(),
                               "); move them to one device first (.to(device))");
  return a.device();
}

// batched_gemm for every dtype matmul takes; a product on a device goes to cuBLAS instead (builds with
// KILN_WITH_CUDA). On the CPU, bfloat16 and float16 products are computed in float: Eigen 3.4 has no 16-bit GEMM, so
// the operands widen, the product accumulates in float and rounds once into c (16-bit storage saves memory here, not
// time).
template <class T>
void batched_matmul(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c, [[maybe_unused]] const char* op) {
#ifdef KILN_WITH_CUDA
  if (c.is_cuda()) return cuda_batched_matmul(a, b, c, op);
#endif
  if constexpr (is_half_v<T>) {
    NoGradGuard no_grad;
    const Tensor<float> wide(TensorImpl::allocate(c.shape(), ScalarType::Float, "matmul"));
    batched_gemm(a.template to<float>(), b.template to<float>(), wide);
    Tensor<T>(c).copy_(wide.template to<T>());  // through another handle to c's memory
  } else {
    batched_gemm(a, b, c);
  }
}

}  // namespace detail

namespace autograd {
// c = a @ b over broadcast batch dims: da = g @ b^T, db = a^T @ g, each summed over the batch dims
// its operand was broadcast along.
template <class T>
struct MatmulBackward : Node {
  MatmulBackward(const ImplPtr& a, const ImplPtr& b, const char* kind) : a_(a), b_(b), kind_(kind) {
    next_edges.push_back(gradient_edge(a));
    next_edges.push_back(gradient_edge(b));
  }
  std::string name() const override { return kind_; }
  void release_saved() override { a_ = b_ = {}; }
  GradList apply(GradList&& grads) override {
    if (!grads.at(0)) return {nullptr, nullptr};
    NoGradGuard no_grad;
    const Tensor<T> g(grads[0]), a(a_.unpack(*this)), b(b_.unpack(*this));
    GradList out(2);
    if (next_edges[0].valid()) out[0] = product_summed_to(g, b.transpose(-1, -2), a.shape());
    if (next_edges[1].valid()) {
      // A column-major b (x @ w.t(), as Linear) gets (g^T a)^T: a^T g in b's own layout, which the
      // transpose's backward then hands on without a copy.
      out[1] = column_major(b) && a.dim() == 2 && g.dim() == 2 ? matmul(g.t(), a).t().impl_ptr()
                                                               : product_summed_to(a.transpose(-1, -2), g, b.shape());
    }
    return out;
  }

 private:
  // A 2-d operand stored column-major: the transpose of a contiguous matrix (x @ w.t(), as Linear).
  static bool column_major(const Tensor<T>& b) {
    return b.dim() == 2 && b.size(0) > 1 && b.size(1) > 1 && b.stride(0) == 1 && b.stride(1) == b.size(0);
  }
  // x @ y summed over the batch dims to `target`. When target has no batch extent (an operand broadcast
  // over the whole batch, as a convolution's weight) and x and y share their batch shape, the products
  // accumulate into one result (gemm_batched with a zero C batch stride) instead of materializing a
  // batch of them and summing.
  static ImplPtr product_summed_to(const Tensor<T>& x, const Tensor<T>& y, const Shape& target) {
    const int64_t m = x.size(-2), n = y.size(-1), k = x.size(-1);
    const bool flat_target = numel_of(target) == m * n && target.size() >= 2 && target[target.size() - 2] == m;
    if constexpr (!is_half_v<T>) {
      if (x.is_cpu() && x.dim() >= 3 && x.dim() == y.dim() && flat_target && x.numel() > 0 && y.numel() > 0 &&
          std::equal(x.shape().begin(), x.shape().end() - 2, y.shape().begin())) {
        const int64_t batch = x.numel() / std::max<int64_t>(m * k, 1);
        const Tensor<T> x3 = x.reshape({batch, m, k}), y3 = y.reshape({batch, k, n});
        Tensor<T> c = empty<T>({m, n});
        cpu::gemm_batched<T>(batch, m, n, k, x3.data_ptr(), x3.stride(0), x3.stride(1), x3.stride(2), y3.data_ptr(),
                             y3.stride(0), y3.stride(1), y3.stride(2), c.data_ptr(), 0, n, 1);
        return c.reshape(target).impl_ptr();
      }
    }
    return sum_to_shape(matmul(x, y).impl_ptr(), target);
  }

  SavedTensor a_, b_;
  const char* kind_;
};
}  // namespace autograd

namespace detail {
// A float product inside an autocast region (core/autocast.hpp): the operands round to the autocast type, the
// product is that type's (its node saves the 16-bit operands) and the result widens back to float.
template <Operand X, Operand Y, class Product>
Tensor<float> autocast_product(const X& x, const Y& y, Product product) {
  return autocast::with_dtype(autocast::device_type_of(x), [&](auto h) {
    using H = decltype(h);
    return Tensor<float>(product(autocast::cast<H>(x), autocast::cast<H>(y)).template to<float>());
  });
}

// Records c's MatmulBackward when a or b requires grad (floating dtypes).
template <class T>
void record_matmul(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c, const char* kind) {
  if constexpr (is_floating_v<T>) {
    if (GradMode::is_enabled() && (autograd::requires_grad(a.impl()) || autograd::requires_grad(b.impl())))
      autograd::meta_of(c.impl_ptr()).grad_fn = std::make_shared<autograd::MatmulBackward<T>>(a.impl_ptr(), b.impl_ptr(), kind);
  }
}
}  // namespace detail

// torch.matmul: 1-D x 1-D is a dot product (0-dim result); a 1-D first operand is a row vector and
// a 1-D second operand a column vector, their added dim removed from the result; otherwise the
// last two dims multiply as matrices and the leading (batch) dims broadcast.
template <Operand X, Operand Y>
auto matmul(const X& x, const Y& y) {
  using T = typename X::value_type;
  static_assert(std::is_same_v<T, typename Y::value_type>,
                "kiln: operands of matmul have different dtypes; convert one with .to<T>()");
  detail::require_gemm_dtype<T>();
  if constexpr (std::is_same_v<T, float>)
    if (autocast::applies_to(x))
      return detail::autocast_product(x, y, [](const auto& a, const auto& b) { return matmul(a, b); });
  const Tensor<T> a = detail::matmul_operand(x), b = detail::matmul_operand(y);
  const int da = a.dim(), db = b.dim();
  if (da == 0 || db == 0)
    throw ShapeError(detail::cat("matmul: both arguments need at least 1 dim, got shapes ", a.shape(), " and ",
                                 b.shape()));
  const Tensor<T> a2 = da == 1 ? a.unsqueeze(0) : a;
  const Tensor<T> b2 = db == 1 ? b.unsqueeze(1) : b;
  const int64_t ka = a2.size(-1), kb = b2.size(-2);
  if (ka != kb) detail::throw_mismatch("matmul", a.shape(), b.shape(), ka, kb);
  Shape ba, bb;
  for (int i = 0; i + 2 < a2.dim(); ++i) ba.push_back(a2.shape()[i]);
  for (int i = 0; i + 2 < b2.dim(); ++i) bb.push_back(b2.shape()[i]);
  Shape batch;
  try {
    batch = broadcast_shapes(ba, bb, "matmul");
  } catch (const ShapeError&) {
    throw ShapeError(detail::cat("matmul: shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied: batch dims ",
                                 ba, " and ", bb, " cannot be broadcast"));
  }
  Shape cshape = batch;
  cshape.push_back(a2.size(-2));
  cshape.push_back(b2.size(-1));
  Tensor<T> c(TensorImpl::allocate(cshape, scalar_type_of<T>(), "matmul", detail::product_device("matmul", a, b)));
  detail::batched_matmul(a2, b2, c, "matmul");
  detail::record_matmul(a2, b2, c, "MatmulBackward");
  Shape result = batch;
  if (da > 1) result.push_back(a2.size(-2));
  if (db > 1) result.push_back(b2.size(-1));
  return c.view(result);
}

// [n, m] x [m, p] -> [n, p].
template <Operand X, Operand Y>
auto mm(const X& x, const Y& y) {
  using T = typename X::value_type;
  static_assert(std::is_same_v<T, typename Y::value_type>,
                "kiln: operands of mm have different dtypes; convert one with .to<T>()");
  detail::require_gemm_dtype<T>();
  if constexpr (std::is_same_v<T, float>)
    if (autocast::applies_to(x))
      return detail::autocast_product(x, y, [](const auto& a, const auto& b) { return mm(a, b); });
  const Tensor<T> a = detail::matmul_operand(x), b = detail::matmul_operand(y);
  if (a.dim() != 2 || b.dim() != 2)
    throw ShapeError(detail::cat("mm: expects 2-D tensors, got shapes ", a.shape(), " and ", b.shape()));
  if (a.size(1) != b.size(0)) detail::throw_mismatch("mm", a.shape(), b.shape(), a.size(1), b.size(0));
  Tensor<T> c(
      TensorImpl::allocate({a.size(0), b.size(1)}, scalar_type_of<T>(), "mm", detail::product_device("mm", a, b)));
  detail::batched_matmul(a, b, c, "mm");
  detail::record_matmul(a, b, c, "MmBackward");
  return c;
}

// [b, n, m] x [b, m, p] -> [b, n, p] (no broadcasting, as torch.bmm).
template <Operand X, Operand Y>
auto bmm(const X& x, const Y& y) {
  using T = typename X::value_type;
  static_assert(std::is_same_v<T, typename Y::value_type>,
                "kiln: operands of bmm have different dtypes; convert one with .to<T>()");
  detail::require_gemm_dtype<T>();
  if constexpr (std::is_same_v<T, float>)
    if (autocast::applies_to(x))
      return detail::autocast_product(x, y, [](const auto& a, const auto& b) { return bmm(a, b); });
  const Tensor<T> a = detail::matmul_operand(x), b = detail::matmul_operand(y);
  if (a.dim() != 3 || b.dim() != 3)
    throw ShapeError(detail::cat("bmm: expects 3-D tensors, got shapes ", a.shape(), " and ", b.shape()));
  if (a.size(0) != b.size(0))
    throw ShapeError(detail::cat("bmm: shapes ", a.shape(), " and ", b.shape(), " have different batch sizes (",
                                 a.size(0), " != ", b.size(0), ")"));
  if (a.size(2) != b.size(1)) detail::throw_mismatch("bmm", a.shape(), b.shape(), a.size(2), b.size(1));
  Tensor<T> c(TensorImpl::allocate({a.size(0), a.size(1), b.size(2)}, scalar_type_of<T>(), "bmm",
                                   detail::product_device("bmm", a, b)));
  detail::batched_matmul(a, b, c, "bmm");
  detail::record_matmul(a, b, c, "BmmBackward");
  return c;
}

// [n, m] x [m] -> [n].
template <Operand X, Operand Y>
auto mv(const X& x, const Y& y) {
  using T = typename X::value_type;
  const Tensor<T> a = detail::matmul_operand(x);
  const Tensor<typename Y::value_type> v = detail::matmul_operand(y);
  if (a.dim() != 2 || v.dim() != 1)
    throw ShapeError(detail::cat("mv: expects a 2-D and a 1-D tensor, got shapes ", a.shape(), " and ", v.shape()));
  if (a.size(1) != v.size(0)) detail::throw_mismatch("mv", a.shape(), v.shape(), a.size(1), v.size(0));
  detail::product_device("mv", a, v);
  return matmul(a, v);
}

// [n] . [n] -> 0-dim.
template <Operand X, Operand Y>
auto dot(const X& x, const Y& y) {
  using T = typename X::value_type;
  const Tensor<T> a = detail::matmul_operand(x);
  const Tensor<typename Y::value_type> b = detail::matmul_operand(y);
  if (a.dim() != 1 || b.dim() != 1)
    throw ShapeError(detail::cat("dot: expects 1-D tensors, got shapes ", a.shape(), " and ", b.shape()));
  if (a.size(0) != b.size(0)) detail::throw_mismatch("dot", a.shape(), b.shape(), a.size(0), b.size(0));
  detail::product_device("dot", a, b);
  return matmul(a, b);
}

}  // namespace kiln

#ifdef KILN_WITH_CUDA  // (a build-wide switch: cuda/evaluate.hpp)
#include "kiln/cuda/matmul.hpp"
#endif

#pragma once
// softmax(x, dim) and log_softmax(x, dim), as torch's: stable (shifted by the max along dim) and
// fused: per row, one pass for the max, one that computes exp(x - max) (stored, for softmax) and
// its sum, and one that scales (or, for log_softmax, writes x - max - log(sum)). The row stays in
// L1/L2 between passes, so memory is read once and written once. Highway vectors throughout.
// The exp is a reduced form of the op table's for the only arguments softmax has, x - max <= 0
// (see exp_nonpositive: half the instructions, and softmax is compute-bound once the row is in
// cache). Along a dim that is not innermost, the same three passes stream whole row segments over
// blocks of up to 2048 columns. A row whose max is not finite (NaN, +inf, or all -inf) gives NaN,
// as PyTorch. Expressions and non-contiguous inputs are materialized (contiguously) first.
#include <hwy/highway.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/cpu/reduce.hpp"
#include "kiln/tensor/reduce.hpp"
#include "kiln/tensor/tensor.hpp"

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {
namespace softmax_detail {
namespace hn = hwy::HWY_NAMESPACE;

// exp(x) for x <= 0 (x - max in a row whose max is finite, so never NaN; -inf allowed): Highway's
// range reduction and polynomial (1 ulp) without the op table's general fix-ups, which this domain
// does not need; results below FLT_MIN / DBL_MIN flush to 0 (an absolute error under 1.2e-38).
// About half the instructions of the general exp, which is what bounds softmax in cache.
template <class D, class V>
HWY_INLINE V exp_nonpositive(D d, V x) {
  using T = hn::TFromD<D>;
  constexpr bool kF32 = sizeof(T) == 4;
  const hn::Rebind<int32_t, D> di;
  const V min_arg = hn::Set(d, kF32 ? T(-87.33654475) : T(-708.3964185322641));
  // q = round(x / ln 2) (x <= 0: truncating x / ln 2 - 0.5), r = x - q ln 2 in two parts.
  const V t = hn::MulAdd(x, hn::Set(d, T(1.442695040888963407359924681)), hn::Set(d, T(-0.5)));
  hn::Vec<decltype(di)> q;
  V qf;
  if constexpr (kF32) {
    q = hn::ConvertTo(di, t);
    qf = hn::ConvertTo(d, q);
  } else {
    q = hn::DemoteTo(di, t);
    qf = hn::PromoteTo(d, q);
  }
  V r = hn::MulAdd(qf, hn::Set(d, kF32 ? T(-0.693145751953125) : T(-0.693145751953125)), x);
  r = hn::MulAdd(qf, hn::Set(d, kF32 ? T(-1.428606765330187045e-6) : T(-1.42860682030941723212e-6)), r);
  V p;
  if constexpr (kF32) {
    p = hn::MulAdd(hn::Set(d, T(0.000198527617612853646278381)), r, hn::Set(d, T(0.00139304355252534151077271)));
    p = hn::MulAdd(p, r, hn::Set(d, T(0.00833336077630519866943359)));
    p = hn::MulAdd(p, r, hn::Set(d, T(0.0416664853692054748535156)));
    p = hn::MulAdd(p, r, hn::Set(d, T(0.166666671633720397949219)));
    p = hn::MulAdd(p, r, hn::Set(d, T(0.5)));
  } else {
    // Taylor coefficients 1/13! ... 1/2 (|r| <= ln2 / 2: the first omitted term is below 1e-17).
    constexpr T c[] = {1.6059043836821614599e-10, 2.0876756987868098979e-9, 2.5052108385441718775e-8,
                       2.7557319223985890653e-7,  2.7557319223985890653e-6, 2.4801587301587301566e-5, 1.9841269841269841270e-4, 1.3888888888888888889e-3,
                       8.3333333333333333333e-3, 4.1666666666666666667e-2, 1.6666666666666666667e-1, 0.5};
    p = hn::Set(d, c[0]);
    for (size_t k = 1; k < sizeof(c) / sizeof(c[0]); ++k) p = hn::MulAdd(p, r, hn::Set(d, c[k]));
  }
  const V y = hn::Add(hn::MulAdd(p, hn::Mul(r, r), r), hn::Set(d, T(1)));
  // 2^q through the exponent field (q >= -126 / -1022 wherever the result is kept).
  V scale;
  if constexpr (kF32) {
    scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(q, hn::Set(di, 127))));
  } else {
    const hn::Rebind<int64_t, D> dl;
    scale = hn::BitCast(d, hn::ShiftLeft<52>(hn::Add(hn::PromoteTo(dl, q), hn::Set(dl, 1023))));
  }
  return hn::IfThenElseZero(hn::Ge(x, min_arg), hn::Mul(y, scale));
}

// One contiguous row of n values: exp(x - max) (or x - max) is stored in y while the exps are
// summed, then y is scaled (or shifted) in place, still in L1/L2. Streaming the result past the cache with non-temporal stores was
// measured slower here (11.5 against 9.0 ms for 4096 x 4096 on one thread), so it is not done.
template <bool kLog, class T>
HWY_INLINE void softmax_row(const T* x, T* y, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const T m = red::extreme_block<true>(red::Ident{}, x, n, -std::numeric_limits<T>::infinity());
  if (!std::isfinite(m)) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::numeric_limits<T>::quiet_NaN();
    return;
  }
  const auto vm = hn::Set(d, m);
  auto s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  auto term = [&](const T* p) { return exp_nonpositive(d, hn::Sub(hn::LoadU(d, p), vm)); };
  // Pass 2 writes exp(x - max) (softmax) or x - max (log_softmax) to y: either way y's cache misses
  // overlap the exp work, and pass 3 then rewrites y in cache.
  auto keep = [&](const T* p, auto e) {
    if constexpr (kLog) return hn::Sub(hn::LoadU(d, p), vm);
    else return e;
  };
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto e0 = term(x + i), e1 = term(x + i + N), e2 = term(x + i + 2 * N), e3 = term(x + i + 3 * N);
    hn::StoreU(keep(x + i, e0), d, y + i);
    hn::StoreU(keep(x + i + N, e1), d, y + i + N);
    hn::StoreU(keep(x + i + 2 * N, e2), d, y + i + 2 * N);
    hn::StoreU(keep(x + i + 3 * N, e3), d, y + i + 3 * N);
    s0 = hn::Add(s0, e0);
    s1 = hn::Add(s1, e1);
    s2 = hn::Add(s2, e2);
    s3 = hn::Add(s3, e3);
  }
  for (; i + N <= n; i += N) {
    const auto e = term(x + i);
    hn::StoreU(keep(x + i, e), d, y + i);
    s0 = hn::Add(s0, e);
  }
  double sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  if (i < n) {
    alignas(HWY_MAX_BYTES) T tmp[HWY_MAX_BYTES / sizeof(T)] = {};
    std::memcpy(tmp, x + i, size_t(n - i) * sizeof(T));
    alignas(HWY_MAX_BYTES) T e[HWY_MAX_BYTES / sizeof(T)];
    hn::Store(term(tmp), d, e);
    for (int64_t k = 0; k < n - i; ++k) {
      sum += double(e[k]);
      y[i + k] = kLog ? x[i + k] - m : e[k];
    }
  }
  if constexpr (kLog) {  // (x - max) - log(sum), in this order as PyTorch
    const T shift = T(std::log(sum));
    const auto vs = hn::Set(d, shift);
    for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Sub(hn::LoadU(d, y + i), vs), d, y + i);
    for (; i < n; ++i) y[i] -= shift;
  } else {
    const T inv = T(1.0 / sum);
    const auto vi = hn::Set(d, inv);
    for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, y + i), vi), d, y + i);
    for (; i < n; ++i) y[i] *= inv;
  }
}

// Softmax down the columns [0, w) of n rows (row i at x + i * stride), reading whole row segments:
// a pass for the column max, one for the sum of exp(x - max), one that writes the result. m and s
// hold w values; rows go in groups of 8 so the column accumulators stay in registers.
template <bool kLog, class T>
HWY_INLINE void softmax_cols(const T* x, T* y, int64_t n, int64_t stride, int64_t w, T* m, T* s) {
  const hn::ScalableTag<T> d;
  const int64_t N = int64_t(hn::Lanes(d));
  constexpr int kGroup = 8;
  std::fill(m, m + w, -std::numeric_limits<T>::infinity());
  std::fill(s, s + w, T(0));
  const T* rows[kGroup];
  for (int64_t i = 0; i < n; i += kGroup) {
    const int g = int(std::min<int64_t>(kGroup, n - i));
    for (int r = 0; r < g; ++r) rows[r] = x + (i + r) * stride;
    red::extreme_rows<true>(red::Ident{}, m, rows, g, w);
  }
  for (int64_t i = 0; i < n; i += kGroup) {
    const int g = int(std::min<int64_t>(kGroup, n - i));
    int64_t k = 0;
    for (; k + N <= w; k += N) {
      const auto vm = hn::LoadU(d, m + k);
      auto acc = hn::LoadU(d, s + k);
      for (int r = 0; r < g; ++r)
        acc = hn::Add(acc, exp_nonpositive(d, hn::Sub(hn::LoadU(d, x + (i + r) * stride + k), vm)));
      hn::StoreU(acc, d, s + k);
    }
    for (; k < w; ++k)
      for (int r = 0; r < g; ++r) s[k] += T(std::exp(double(x[(i + r) * stride + k]) - double(m[k])));
  }
  // s becomes the scale (softmax) or the shift (log_softmax); a non-finite max gives NaN.
  for (int64_t k = 0; k < w; ++k) {
    if (!std::isfinite(m[k])) s[k] = std::numeric_limits<T>::quiet_NaN();
    else s[k] = kLog ? T(double(m[k]) + std::log(double(s[k]))) : T(1.0 / double(s[k]));
  }
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * stride;
    T* yr = y + i * stride;
    int64_t k = 0;
    for (; k + N <= w; k += N) {
      const auto v = hn::LoadU(d, xr + k);
      if constexpr (kLog) {
        hn::StoreU(hn::Sub(v, hn::LoadU(d, s + k)), d, yr + k);
      } else {
        const auto e = exp_nonpositive(d, hn::Sub(v, hn::LoadU(d, m + k)));
        hn::StoreU(hn::Mul(e, hn::LoadU(d, s + k)), d, yr + k);
      }
    }
    for (; k < w; ++k) yr[k] = kLog ? xr[k] - s[k] : T(std::exp(double(xr[k]) - double(m[k]))) * s[k];
  }
}

}  // namespace softmax_detail
}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();

namespace kiln {

namespace cpu {
// Softmax along the middle dim of a contiguous [outer, n, inner] tensor.
template <bool kLog, class T>
void softmax(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  namespace sd = kiln::HWY_NAMESPACE::softmax_detail;
  if (outer * n * inner == 0) return;
  constexpr int64_t cost = 24;
  if (inner == 1) {
    parallel_for(outer, n * cost, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) sd::softmax_row<kLog>(x + r * n, y + r * n, n);
    });
    return;
  }
  // Blocks of up to 2048 columns: long contiguous row segments, per-column state in L1.
  const int64_t w = std::min<int64_t>(inner, 2048);
  const int64_t blocks = (inner + w - 1) / w;
  parallel_for(outer * blocks, n * w * cost, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> m(static_cast<size_t>(w)), s(static_cast<size_t>(w));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t o = b / blocks, k0 = (b % blocks) * w, width = std::min(w, inner - k0);
      sd::softmax_cols<kLog>(x + o * n * inner + k0, y + o * n * inner + k0, n, inner, width, m.data(), s.data());
    }
  });
}
}  // namespace cpu

namespace autograd {
// softmax: dx = y * (g - sum(g * y, dim)); log_softmax: dx = g - exp(y) * sum(g, dim). Saves the output.
template <bool kLog, class T>
struct SoftmaxBackward : Node {
  SoftmaxBackward(const ImplPtr& input, const ImplPtr& output, int dim) : y_(output), dim_(dim) {
    next_edges.push_back(gradient_edge(input));
  }
  std::string name() const override { return kLog ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  void release_saved() override { y_ = {}; }
  GradList apply(GradList&& grads) override {
    if (!grads.at(0)) return {nullptr};
    NoGradGuard no_grad;
    const Tensor<T> g(grads[0]), y(y_.unpack(*this));
    if constexpr (kLog) return {kiln::detail::untracked(g - exp(y) * sum(g, Dims{dim_}, true)).impl_ptr()};
    else return {kiln::detail::untracked(y * (g - sum(g * y, Dims{dim_}, true))).impl_ptr()};
  }

 private:
  SavedTensor y_;
  int64_t dim_;
};
}  // namespace autograd

namespace detail {
#ifdef KILN_WITH_CUDA
// (cuda/evaluate.hpp, which <kiln/kiln.hpp> includes in such builds)
template <bool kLog, Dtype T>
Tensor<T> cuda_softmax(const Tensor<T>& in, int dim, const char* op);
#endif

template <bool kLog, Operand X, DimIndex I>
auto softmax_impl(const X& x, I dim, const char* op) {
  using T = typename X::value_type;
  require_floating<T>();
  if constexpr (is_half_v<T>) {  // computed in float
    return Tensor<T>(softmax_impl<kLog>(reduce_node(x).template to<float>(), dim, op).template to<T>());
  } else {
    const Tensor<T> in = contiguous_of(x);
    const int d = wrap_dim(int64_t(dim), in.dim(), op);
    const Tensor<T> out = [&] {
#ifdef KILN_WITH_CUDA
      if (in.is_cuda()) return cuda_softmax<kLog>(in, d, op);
#endif
      const auto [outer, n, inner] = split_at(in.shape(), d);
      Tensor<T> y(TensorImpl::allocate(in.shape(), scalar_type_of<T>(), op));
      cpu::softmax<kLog>(in.data_ptr(), y.data_ptr(), outer, n, inner);
      return y;
    }();
    if (GradMode::is_enabled() && autograd::requires_grad(in.impl()))
      autograd::meta_of(out.impl_ptr()).grad_fn =
          std::make_shared<autograd::SoftmaxBackward<kLog, T>>(in.impl_ptr(), out.impl_ptr(), d);
    return out;
  }
}
}  // namespace detail

template <Operand X, DimIndex I>
auto softmax(const X& x, I dim) {
  return detail::softmax_impl<false>(x, dim, "softmax");
}
template <Operand X, DimIndex I>
auto log_softmax(const X& x, I dim) {
  return detail::softmax_impl<true>(x, dim, "log_softmax");
}

}  // namespace kiln

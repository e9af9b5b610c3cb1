#pragma once
// Reductions with libtorch's names: sum, mean, prod, max, min, amax, amin, argmax, argmin, var, std,
// var_mean, std_mean, norm, logsumexp, all, any over all elements or a list of dims (keepdim),
// and cumsum and topk along a dim. Each takes a Tensor or an expression; an expression is reduced
// without being materialized (sum(a * b) is one pass). Float results accumulate in double and are
// bitwise the same for any number of threads (see cpu/reduce.hpp).
//
//   sum(x)                       0-dim result        sum(x, {0, 2}, keepdim)   sum(x, -1)
//   auto [values, indices] = max(x, 1);              max(a, b) is maximum(a, b), as torch.max
//   var(x, {1}, /*correction=*/0, /*keepdim=*/true)  (a bool there reads as torch's `unbiased`)
//
// Result dtypes follow PyTorch: sum, prod and cumsum of integer or bool tensors give int64;
// argmax / argmin and the indices of max / min / topk give int64; all / any give bool; mean, var,
// std, norm and logsumexp need a floating-point input; max / min / amax / amin keep the dtype.
// Empty reductions follow PyTorch too: sum 0, prod 1, mean / var NaN, logsumexp -inf, all true,
// any false; max, min, argmax, argmin and the inf-norms throw (they have no identity).
#include <bit>
#include <concepts>
#include <limits>
#include <tuple>

#include "kiln/cpu/reduce.hpp"
#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/gather.hpp"
#include "kiln/tensor/tensor.hpp"
#ifdef KILN_WITH_CUDA
#include "kiln/cuda/reduction.hpp"
#endif

namespace kiln {

// An integer dim argument (a bool is not one: var(x, true) means unbiased, as in torch).
template <class I>
concept DimIndex = std::integral<I> && !std::same_as<I, bool>;

namespace detail {

// The dtype sum, prod and cumsum return: int64 for integers and bool, the input's dtype otherwise.
template <class T>
using sum_result_t = std::conditional_t<std::is_integral_v<T>, int64_t, T>;

template <Operand X>
auto reduce_node(const X& x) {
  return to_node<typename X::value_type>(x);
}

struct Reduction {
  uint32_t mask = 0;  // bit i: dim i is reduced
  Shape out;          // result shape
  int64_t count = 1;  // elements per result
};

// All dims: a 0-dim result, or all dims kept with size 1.
inline Reduction reduce_all(const Shape& in, bool keepdim = false) {
  Reduction r;
  for (int i = 0; i < in.size(); ++i) {
    r.mask |= 1u << i;
    r.count *= in[i];
    if (keepdim) r.out.push_back(1);
  }
  return r;
}

// The listed dims (negative ones count from the end); an empty list means all dims, as PyTorch.
inline Reduction reduce_dims(const Shape& in, const Dims& dims, bool keepdim, const char* op) {
  if (dims.empty()) return reduce_all(in, keepdim);
  Reduction r;
  for (int64_t d : dims) {
    const int k = wrap_dim(d, in.size(), op);
    if (in.size() == 0) continue;  // a 0-dim tensor accepts dim 0 and -1
    if (r.mask >> k & 1u)
      throw std::invalid_argument(cat(op, ": dim ", k, " appears more than once in the list of dims ", dims));
    r.mask |= 1u << k;
  }
  for (int i = 0; i < in.size(); ++i) {
    if (r.mask >> i & 1u) {
      r.count *= in[i];
      if (keepdim) r.out.push_back(1);
    } else {
      r.out.push_back(in[i]);
    }
  }
  return r;
}

// Reductions without an identity (max, argmax, the inf-norms) throw on zero elements.
inline void check_nonempty(const Shape& in, const Reduction& r, const char* op) {
  if (r.count != 0) return;
  for (int i = 0; i < in.size(); ++i)
    if ((r.mask >> i & 1u) && in[i] == 0)
      throw std::invalid_argument(cat(op, ": cannot reduce over dim ", i, " of size 0 (input shape ", in,
                                      "): the operation has no identity"));
  throw std::invalid_argument(cat(op, ": the input of shape ", in, " is empty: the operation has no identity"));
}

template <class T>
constexpr void require_floating() {
  static_assert(is_floating_v<T>,
                "kiln: mean, var, std, norm, logsumexp and softmax need a floating-point tensor; convert it with "
                ".to<float>()");
}

template <Dtype Out, class R, class E>
Tensor<Out> run_reduce(const R& r, const E& e, const Shape& in, const Reduction& rd, const char* op,
                       bool keep_order = false) {
  check_versions(e);
  Tensor<Out> out(TensorImpl::allocate(rd.out, scalar_type_of<Out>(), op));
  cpu::reduce(r, e, in, rd.mask, out.impl(), keep_order);
  return out;
}

namespace red = cpu::red;

// ---- one implementation per reduction, shared by its overloads ----------------------------------

// The input's shape with the reduced dims kept as 1.
inline Shape kept_shape(const Shape& in, const Reduction& rd) {
  Shape kept = in;
  for (int i = 0; i < in.size(); ++i)
    if (rd.mask >> i & 1u) kept[i] = 1;
  return kept;
}

// sum and mean record one node for the whole reduced expression: its fused backward, fed the
// incoming gradient broadcast over the reduced dims (divided by the count for a mean).
template <class E, class Out>
void record_sum(const E& e, const Tensor<Out>& out, const Shape& in, const Reduction& rd, bool mean) {
  if constexpr (is_floating_v<typename E::value_type> && leaf_count_v<E> > 0) {
    if (autograd::needs_graph(e))
      autograd::record_fused<E, false>(e, out.impl_ptr(), in, kept_shape(in, rd), mean ? "MeanBackward" : "SumBackward",
                             mean ? 1.0 / double(rd.count) : 1.0);
  }
}

}  // namespace detail

namespace autograd {
// The backward of a reduction other than sum and mean: formula(g, x, out) gives the input's
// gradient from the incoming gradient and the output (both with the reduced dims kept as 1, so they
// broadcast against the input x). Saves x and the output.
template <class T, class Formula>
struct ReductionBackward : Node {
  ReductionBackward(const char* name, const ImplPtr& x, const ImplPtr& out, Shape kept, Formula f)
      : name_(name), x_(x), out_(out), kept_(std::move(kept)), formula_(std::move(f)) {
    next_edges.push_back(gradient_edge(x));
  }
  std::string name() const override { return name_; }
  void release_saved() override { x_ = out_ = {}; }
  GradList apply(GradList&& grads) override {
    if (!grads.at(0)) return {nullptr};
    NoGradGuard no_grad;
    const ImplPtr& o = out_.unpack(*this);
    const Tensor<T> g(grads[0]->view_as(kept_, contiguous_strides(kept_), grads[0]->offset));
    const Tensor<T> out(o->view_as(kept_, contiguous_strides(kept_), o->offset));
    return {kiln::detail::untracked(formula_(g.contiguous(), Tensor<T>(x_.unpack(*this)), out)).impl_ptr()};
  }

 private:
  const char* name_;
  SavedTensor x_, out_;
  Shape kept_;
  Formula formula_;
};
}  // namespace autograd

namespace detail {

// Runs compute(node) for a reduction of e; when e needs a graph, e is first materialized (recording
// its own node) and the reduction records a ReductionBackward against it.
template <class E, class Compute, class Formula>
auto differentiable_reduction(const E& e, const Shape& in, const Reduction& rd, const char* name, Compute&& compute,
                              Formula formula) {
  using T = typename E::value_type;
  if constexpr (is_floating_v<T> && leaf_count_v<E> > 0) {
    if (autograd::needs_graph(e)) {
      const Tensor<T> x(e);
      auto out = compute(Leaf<T>(x.impl_ptr()));
      autograd::meta_of(out.impl_ptr()).grad_fn = std::make_shared<autograd::ReductionBackward<T, Formula>>(
          name, x.impl_ptr(), out.impl_ptr(), kept_shape(in, rd), std::move(formula));
      return out;
    }
  }
  return compute(e);
}

// The gradient of a max / min / inf-norm: split evenly among the elements equal to the result.
template <class T>
Tensor<T> split_among_extremes(const Tensor<T>& g, const Tensor<T>& hit_values, const Tensor<T>& out, const Dims& dims) {
  const Tensor<T> hit = untracked((hit_values == out).template to<T>());
  return untracked(g * hit / sum(hit, dims, true));
}

// The reduced dims as a list.
inline Dims reduced_dims(const Shape& in, const Reduction& rd) {
  Dims dims;
  for (int i = 0; i < in.size(); ++i)
    if (rd.mask >> i & 1u) dims.push_back(i);
  return dims;
}

#ifdef KILN_WITH_CUDA
// (cuda/evaluate.hpp, which <kiln/kiln.hpp> includes in such builds)
template <class E>
std::optional<Device> leaves_device(const E& expr);
template <cuda::Reduce R, Dtype Out, class E>
Tensor<Out> cuda_reduce(const E& e, const Shape& in, const Reduction& rd, const char* op, Device device);
// In a reduction's implementation: returns the reduction of x (e or a materialized node of it) on its device when
// x's leaves are CUDA tensors.
#define KILN_REDUCE_ON_CUDA(R, Out, op, x)                                    \
  if (const std::optional<Device> d = leaves_device(x); d && d->is_cuda()) \
    return cuda_reduce<cuda::Reduce::R, Out>(x, in, rd, op, *d);

// logsumexp and var / std on a device, from the reduction kernels (sums in double): the max (or mean) along the
// dims, then the sum of exp(x - max) (or of the squared deviations), the rest elementwise. A max of +-inf is not
// subtracted (exp(inf - inf) would be NaN): the sum is then inf or 0 and the log gives the CPU's +-inf.
template <class E>
auto cuda_logsumexp(const E& e, const Shape& in, const Reduction& rd, Device d) {
  using T = typename E::value_type;
  using S = compute_t<T>;
  constexpr S inf = std::numeric_limits<S>::infinity();
  if (rd.count == 0) return full<T>(rd.out, T(-inf), d);  // the log of an empty sum, as PyTorch
  const Tensor<T> largest = cuda_reduce<cuda::Reduce::Max, T>(e, in, rd, "logsumexp", d);
  const Tensor<T> shift(where(abs(largest) == inf, S(0), largest));
  const Tensor<T> total =
      cuda_reduce<cuda::Reduce::Sum, T>(exp(e - shift.view(kept_shape(in, rd))), in, rd, "logsumexp", d);
  return Tensor<T>(log(total) + shift);
}
template <class E>
auto cuda_var(const E& e, const Shape& in, const Reduction& rd, double correction, bool take_sqrt, Device d) {
  using T = typename E::value_type;
  using S = compute_t<T>;
  const char* op = take_sqrt ? "std" : "var";
  const Tensor<T> mean = cuda_reduce<cuda::Reduce::Mean, T>(e, in, rd, op, d);
  const Tensor<T> squares = cuda_reduce<cuda::Reduce::Sum, T>(square(e - mean.view(kept_shape(in, rd))), in, rd, op, d);
  const S denominator = S(std::max(0.0, double(rd.count) - correction));
  return take_sqrt ? Tensor<T>(sqrt(squares / denominator)) : Tensor<T>(squares / denominator);
}
#else
#define KILN_REDUCE_ON_CUDA(R, Out, op, x)
#endif

template <class E>
auto sum_impl(const E& e, const Shape& in, const Reduction& rd) {
  using T = typename E::value_type;
  using Out = sum_result_t<T>;
  const Tensor<Out> out = [&] {
    KILN_REDUCE_ON_CUDA(Sum, Out, "sum", e)
    return run_reduce<Out>(red::SumReducer<compute_t<T>, Out>{}, e, in, rd, "sum");
  }();
  record_sum(e, out, in, rd, false);
  return out;
}
template <class E>
auto mean_impl(const E& e, const Shape& in, const Reduction& rd) {
  using T = typename E::value_type;
  require_floating<T>();
  const Tensor<T> out = [&] {
    KILN_REDUCE_ON_CUDA(Mean, T, "mean", e)
    return run_reduce<T>(red::SumReducer<compute_t<T>, T, red::Ident, red::SumFinish::Mean>{}, e, in, rd, "mean");
  }();
  record_sum(e, out, in, rd, true);
  return out;
}
template <class E>
auto prod_impl(const E& e, const Shape& in, const Reduction& rd) {
  using T = typename E::value_type;
  using Out = sum_result_t<T>;
  const Dims dims = reduced_dims(in, rd);
  // d prod / dx_i is the product of the others: out / x_i without zeros; with one zero, the product
  // of the nonzeros at the zero and 0 elsewhere; with more, 0.
  return differentiable_reduction(
      e, in, rd, "ProdBackward",
      [&](const auto& node) {
        KILN_REDUCE_ON_CUDA(Prod, Out, "prod", node)
        return run_reduce<Out>(red::ProdReducer<compute_t<T>, Out>{}, node, in, rd, "prod");
      },
      [dims](const auto& g, const auto& x, const auto& out) {
        using V = typename std::remove_cvref_t<decltype(x)>::value_type;
        using S = compute_t<V>;  // scalars in the compute type (float for bfloat16, float16)
        const Tensor<V> zeros = sum(untracked((x == S(0)).template to<V>()), dims, true);
        const Tensor<V> others = prod(untracked(where(x == S(0), S(1), x)), dims, true);
        return untracked(g * where(x != S(0), where(zeros == S(0), out / x, S(0)), where(zeros == S(1), others, S(0))));
      });
}
template <bool kMax, class E>
auto extreme_impl(const E& e, const Shape& in, const Reduction& rd, const char* op) {
  using T = typename E::value_type;
  check_nonempty(in, rd, op);
  const Dims dims = reduced_dims(in, rd);
  return differentiable_reduction(
      e, in, rd, kMax ? "AmaxBackward" : "AminBackward",
      [&](const auto& node) {
        if constexpr (kMax) {
          KILN_REDUCE_ON_CUDA(Max, T, op, node)
        } else {
          KILN_REDUCE_ON_CUDA(Min, T, op, node)
        }
        return run_reduce<T>(red::ExtremeReducer<compute_t<T>, T, kMax>{}, node, in, rd, op);
      },
      [dims](const auto& g, const auto& x, const auto& out) { return split_among_extremes(g, x, out, dims); });
}
template <class E>
auto logsumexp_impl(const E& e, const Shape& in, const Reduction& rd) {
  using T = typename E::value_type;
  require_floating<T>();
  return differentiable_reduction(
      e, in, rd, "LogsumexpBackward",
      [&](const auto& node) {
#ifdef KILN_WITH_CUDA
        if (const std::optional<Device> d = leaves_device(node); d && d->is_cuda()) return cuda_logsumexp(node, in, rd, *d);
#endif
        return run_reduce<T>(red::LogSumExpReducer<compute_t<T>, T>{}, node, in, rd, "logsumexp");
      },
      [](const auto& g, const auto& x, const auto& out) { return g * exp(x - out); });
}
template <bool kAll, class E>
auto logical_impl(const E& e, const Shape& in, const Reduction& rd) {
  using T = typename E::value_type;
#ifdef KILN_WITH_CUDA
  // On a device: the count of nonzero elements (NaN among them) by the sum kernel, then all (every one) or any.
  if (const std::optional<Device> d = leaves_device(e); d && d->is_cuda()) {
    const auto nonzero = [&] {
      if constexpr (std::is_same_v<T, bool>) return e;
      else return e != compute_t<T>(0);
    }();
    const Tensor<int64_t> count =
        cuda_reduce<cuda::Reduce::Sum, int64_t>(nonzero.template to<int64_t>(), in, rd, kAll ? "all" : "any", *d);
    return kAll ? Tensor<bool>(count == rd.count) : Tensor<bool>(count != int64_t(0));
  }
#endif
  return run_reduce<bool>(red::LogicalReducer<compute_t<T>, kAll>{}, e, in, rd, kAll ? "all" : "any");
}
template <bool kMax, class E>
Tensor<int64_t> arg_impl(const E& e, const Shape& in, const Reduction& rd, const char* op) {
  using T = typename E::value_type;
  check_nonempty(in, rd, op);
#ifdef KILN_WITH_CUDA
  if (const std::optional<Device> d = leaves_device(e); d && d->is_cuda())
    check<std::invalid_argument>(std::popcount(rd.mask) == 1, op, ": over ", std::popcount(rd.mask),
                                 " dims of a CUDA tensor of shape ", in, " (one dim only on CUDA yet; flatten() it first)");
#endif
  if constexpr (kMax) {
    KILN_REDUCE_ON_CUDA(ArgMax, int64_t, op, e)
  } else {
    KILN_REDUCE_ON_CUDA(ArgMin, int64_t, op, e)
  }
  return run_reduce<int64_t>(red::ArgReducer<compute_t<T>, T, kMax>{}, e, in, rd, op, /*keep_order=*/true);
}
// max(x, dim) / min(x, dim): values and indices in one pass.
template <bool kMax, class E>
auto extreme_with_indices(const E& e, const Shape& in, const Reduction& rd, const char* op);

// max(x, dim) / min(x, dim) backward: the gradient goes to the element each index names.
template <bool kMax, class E>
auto extreme_with_indices_recorded(const E& e, const Shape& in, const Reduction& rd, const char* op) {
  using T = typename E::value_type;
  if constexpr (is_floating_v<T> && leaf_count_v<E> > 0) {
    if (autograd::needs_graph(e)) {
      const Tensor<T> x(e);
      auto result = extreme_with_indices<kMax>(Leaf<T>(x.impl_ptr()), in, rd, op);
      const Dims dims = reduced_dims(in, rd);
      const int d = int(dims[0]);
      const Shape kept = kept_shape(in, rd);
      const Tensor<int64_t>& idx = std::get<1>(result);
      const Tensor<int64_t> indices(idx.impl_ptr()->view_as(kept, contiguous_strides(kept), idx.impl_ptr()->offset));
      Shape line;
      for (int i = 0; i < in.size(); ++i) line.push_back(i == d ? in[i] : 1);
      const Tensor<int64_t> positions = arange<int64_t>(0, double(in[d])).view(line).to(x.device());
      auto formula = [indices, positions](const auto& g, const auto& x_, const auto&) {
        using V = typename std::remove_cvref_t<decltype(x_)>::value_type;
        using S = compute_t<V>;  // scalars in the compute type (float for bfloat16, float16)
        return untracked(where(positions == indices, g, S(0)));
      };
      autograd::meta_of(std::get<0>(result).impl_ptr()).grad_fn =
          std::make_shared<autograd::ReductionBackward<T, decltype(formula)>>(
              kMax ? "MaxBackward" : "MinBackward", x.impl_ptr(), std::get<0>(result).impl_ptr(), kept, formula);
      return result;
    }
  }
  return extreme_with_indices<kMax>(e, in, rd, op);
}

template <bool kMax, class E>
auto extreme_with_indices(const E& e, const Shape& in, const Reduction& rd, const char* op) {
  using T = typename E::value_type;
  check_nonempty(in, rd, op);
  check_versions(e);
#ifdef KILN_WITH_CUDA
  if (const std::optional<Device> d = leaves_device(e); d && d->is_cuda()) {  // two passes: the extreme, its index
    using R = cuda::Reduce;
    return std::make_tuple(cuda_reduce<kMax ? R::Max : R::Min, T>(e, in, rd, op, *d),
                           cuda_reduce<kMax ? R::ArgMax : R::ArgMin, int64_t>(e, in, rd, op, *d));
  }
#endif
  Tensor<T> values(TensorImpl::allocate(rd.out, scalar_type_of<T>(), op));
  Tensor<int64_t> indices(TensorImpl::allocate(rd.out, ScalarType::Int64, op));
  red::ArgReducer<compute_t<T>, T, kMax> r;
  r.indices_base = indices.impl().data_bytes();
  r.values_base = values.impl().data_bytes();
  cpu::reduce(r, e, in, rd.mask, indices.impl(), /*keep_order=*/true);
  return std::make_tuple(values, indices);
}
template <class E>
auto var_impl(const E& e, const Shape& in, const Reduction& rd, double correction, bool take_sqrt) {
  using T = typename E::value_type;
  require_floating<T>();
  red::VarReducer<compute_t<T>, T> r;
  r.correction = correction;
  r.take_sqrt = take_sqrt;
  const Dims dims = reduced_dims(in, rd);
  // var: 2 (x - mean) / (N - correction); std: that over 2 std, and 0 where std is 0 (x constant: 0 / 0), as PyTorch.
  const double denom = std::max(0.0, double(rd.count) - correction);
  return differentiable_reduction(
      e, in, rd, take_sqrt ? "StdBackward" : "VarBackward",
      [&](const auto& node) {
#ifdef KILN_WITH_CUDA
        if (const std::optional<Device> d = leaves_device(node); d && d->is_cuda())
          return cuda_var(node, in, rd, correction, take_sqrt, *d);
#endif
        return run_reduce<T>(r, node, in, rd, take_sqrt ? "std" : "var");
      },
      [dims, denom, take_sqrt](const auto& g, const auto& x, const auto& out) {
        using V = typename std::remove_cvref_t<decltype(x)>::value_type;
        using S = compute_t<V>;  // scalars in the compute type (float for bfloat16, float16)
        const Tensor<V> centered = untracked(x - mean(x, dims, true));
        if (take_sqrt) return untracked(where(out == S(0), S(0), g * centered / (out * S(denom))));
        return untracked(g * centered * S(2 / denom));
      });
}
template <class E>
auto var_mean_impl(const E& e, const Shape& in, const Reduction& rd, double correction, bool take_sqrt) {
  using T = typename E::value_type;
  require_floating<T>();
  if constexpr (is_floating_v<T> && leaf_count_v<E> > 0) {
    // With a graph, or on a device, two reductions of the materialized input instead of one pass.
    bool on_device = false;
#ifdef KILN_WITH_CUDA
    const std::optional<Device> d = leaves_device(e);
    on_device = d && d->is_cuda();
#endif
    if (autograd::needs_graph(e) || on_device) {
      const Leaf<T> x(Tensor<T>(e).impl_ptr());
      return std::make_tuple(var_impl(x, in, rd, correction, take_sqrt), mean_impl(x, in, rd));
    }
  }
  const char* op = take_sqrt ? "std_mean" : "var_mean";
  check_versions(e);
  Tensor<T> out(TensorImpl::allocate(rd.out, scalar_type_of<T>(), op));
  Tensor<T> mean(TensorImpl::allocate(rd.out, scalar_type_of<T>(), op));
  red::VarReducer<compute_t<T>, T> r;
  r.correction = correction;
  r.take_sqrt = take_sqrt;
  r.out_base = out.impl().data_bytes();
  r.mean_base = mean.impl().data_bytes();
  cpu::reduce(r, e, in, rd.mask, out.impl());
  return std::make_tuple(out, mean);
}
template <class E>
auto norm_impl(const E& e, const Shape& in, const Reduction& rd, double p) {
  using T = typename E::value_type;
  using V = compute_t<T>;
  require_floating<T>();
  constexpr double inf = std::numeric_limits<double>::infinity();
  using F = red::SumFinish;
#ifdef KILN_WITH_CUDA
  // On a device: the reduction kernels over each element's term (sums in double), then the root elementwise.
  if (const std::optional<Device> d = leaves_device(e); d && d->is_cuda()) {
    using R = cuda::Reduce;
    if (p == 2) return Tensor<T>(sqrt(cuda_reduce<R::Sum, T>(square(e), in, rd, "norm", *d)));
    if (p == 1) return cuda_reduce<R::Sum, T>(abs(e), in, rd, "norm", *d);
    if (p == 0) return cuda_reduce<R::Sum, T>((e != V(0)).template to<T>(), in, rd, "norm", *d);
    if (p == inf || p == -inf) {
      check_nonempty(in, rd, "norm");
      if (p > 0) return cuda_reduce<R::Max, T>(abs(e), in, rd, "norm", *d);
      return cuda_reduce<R::Min, T>(abs(e), in, rd, "norm", *d);
    }
    check(!std::isnan(p), "norm: p must not be NaN");
    return Tensor<T>(pow(cuda_reduce<R::Sum, T>(pow(abs(e), V(p)), in, rd, "norm", *d), V(1 / p)));
  }
#endif
  if (p == 2) return run_reduce<T>(red::SumReducer<V, T, red::SquareT, F::Sqrt>{}, e, in, rd, "norm");
  if (p == 1) return run_reduce<T>(red::SumReducer<V, T, red::AbsT>{}, e, in, rd, "norm");
  if (p == 0) return run_reduce<T>(red::SumReducer<V, T, red::NonZeroT>{}, e, in, rd, "norm");
  if (p == inf || p == -inf) {
    check_nonempty(in, rd, "norm");
    if (p > 0) return run_reduce<T>(red::ExtremeReducer<V, T, true, red::AbsT>{}, e, in, rd, "norm");
    return run_reduce<T>(red::ExtremeReducer<V, T, false, red::AbsT>{}, e, in, rd, "norm");
  }
  check(!std::isnan(p), "norm: p must not be NaN");
  return run_reduce<T>(red::SumReducer<V, T, red::PowAbsT, F::Root>{red::PowAbsT{p}, p}, e, in, rd, "norm");
}
// norm's gradient: sign(x) |x|^(p-1) / out^(p-1) (x / out for p = 2; 0 where out or x is 0, as PyTorch:
// |x|^(p-1) is inf at x = 0 for p < 1); the inf-norms
// split it among the elements of extreme magnitude; the 0-"norm" has none.
template <class E>
auto norm_grad_impl(const E& e, const Shape& in, const Reduction& rd, double p) {
  const Dims dims = reduced_dims(in, rd);
  return differentiable_reduction(
      e, in, rd, "NormBackward", [&](const auto& node) { return norm_impl(node, in, rd, p); },
      [dims, p](const auto& g, const auto& x, const auto& out) {
        using V = typename std::remove_cvref_t<decltype(x)>::value_type;
        using S = compute_t<V>;  // scalars in the compute type (float for bfloat16, float16)
        if (std::isinf(p)) return untracked(sign(x) * split_among_extremes(g, untracked(abs(x)), out, dims));
        if (p == 0) return untracked(x * S(0));
        if (p == 1) return untracked(g * sign(x));
        if (p == 2) return untracked(where(out == S(0), S(0), g * x / out));
        return untracked(
            where(out == S(0) || x == S(0), S(0), g * sign(x) * pow(abs(x), S(p - 1)) / pow(out, S(p - 1))));
      });
}

}  // namespace detail

// ---- sum, mean, prod, amax, amin, logsumexp, all, any: (x), (x, {dims}, keepdim), (x, dim, keepdim)

#define KILN_REDUCTION_OVERLOADS(name, impl)                                                   \
  template <Operand X>                                                                         \
  auto name(const X& x) {                                                                      \
    const auto e = detail::reduce_node(x);                                                     \
    const Shape in = e.shape();                                                                \
    return detail::impl(e, in, detail::reduce_all(in));                                        \
  }                                                                                            \
  template <Operand X>                                                                         \
  auto name(const X& x, const Dims& dims, bool keepdim = false) {                              \
    const auto e = detail::reduce_node(x);                                                     \
    const Shape in = e.shape();                                                                \
    return detail::impl(e, in, detail::reduce_dims(in, dims, keepdim, #name));                \
  }                                                                                            \
  template <Operand X, DimIndex I>                                                             \
  auto name(const X& x, I dim, bool keepdim = false) {                                         \
    return name(x, Dims{int64_t(dim)}, keepdim);                                               \
  }

namespace detail {
template <class E> auto amax_impl(const E& e, const Shape& in, const Reduction& rd) { return extreme_impl<true>(e, in, rd, "amax"); }
template <class E> auto amin_impl(const E& e, const Shape& in, const Reduction& rd) { return extreme_impl<false>(e, in, rd, "amin"); }
template <class E> auto all_impl(const E& e, const Shape& in, const Reduction& rd) { return logical_impl<true>(e, in, rd); }
template <class E> auto any_impl(const E& e, const Shape& in, const Reduction& rd) { return logical_impl<false>(e, in, rd); }
#undef KILN_REDUCE_ON_CUDA
}  // namespace detail

KILN_REDUCTION_OVERLOADS(sum, sum_impl)
KILN_REDUCTION_OVERLOADS(mean, mean_impl)
KILN_REDUCTION_OVERLOADS(prod, prod_impl)
KILN_REDUCTION_OVERLOADS(amax, amax_impl)
KILN_REDUCTION_OVERLOADS(amin, amin_impl)
KILN_REDUCTION_OVERLOADS(logsumexp, logsumexp_impl)
KILN_REDUCTION_OVERLOADS(all, all_impl)
KILN_REDUCTION_OVERLOADS(any, any_impl)
#undef KILN_REDUCTION_OVERLOADS

// ---- max / min: over all elements; along a dim with indices; elementwise of two operands --------

template <Operand X>
auto max(const X& x) {
  const auto e = detail::reduce_node(x);
  const Shape in = e.shape();
  return detail::extreme_impl<true>(e, in, detail::reduce_all(in), "max");
}
template <Operand X>
auto min(const X& x) {
  const auto e = detail::reduce_node(x);
  const Shape in = e.shape();
  return detail::extreme_impl<false>(e, in, detail::reduce_all(in), "min");
}
// (values, indices) of the max along dim, the first occurrence; NaN counts as the max.
template <Operand X, DimIndex I>
auto max(const X& x, I dim, bool keepdim = false) {
  const auto e = detail::reduce_node(x);
  const Shape in = e.shape();
  return detail::extreme_with_indices_recorded<true>(e, in, detail::reduce_dims(in, {int64_t(dim)}, keepdim, "max"), "max");
}
template <Operand X, DimIndex I>
auto min(const X& x, I dim, bool keepdim = false) {
  const auto e = detail::reduce_node(x);
  const Shape in = e.shape();
  return detail::extreme_with_indices_recorded<false>(e, in, detail::reduce_dims(in, {int64_t(dim)}, keepdim, "min"), "min");
}
template <Operand A, Operand B>
auto max(const A& a, const B& b) { return maximum(a, b); }
template <Operand A, Operand B>
auto min(const A& a, const B& b) { return minimum(a, b); }

// ---- argmax / argmin: flat index over all elements, or the index along dim ----------------------

template <Operand X>
Tensor<int64_t> argmax(const X& x) {
  const auto e = detail::reduce_node(x);
  const Shape in = e.shape();
  return detail::arg_impl<true>(e, in, detail::reduce_all(in), "argmax");
}
template <Operand X>
Tensor<int64_t> argmin(const X& x) {
  const auto e = detail::reduce_node(x);
  const Shape in = e.shape();
  return detail::arg_impl<false>(e, in, detail::reduce_all(in), "argmin");
}
template <Operand X, DimIndex I>
Tensor<int64_t> argmax(const X& x, I dim, bool keepdim = false) {
  const auto e = detail::reduce_node(x);
  const Shape in = e.shape();
  return detail::arg_impl<true>(e, in, detail::reduce_dims(in, {int64_t(dim)}, keepdim, "argmax"), "argmax");
}
template <Operand X, DimIndex I>
Tensor<int64_t> argmin(const X& x, I dim, bool keepdim = false) {
  const auto e = detail::reduce_node(x);
  const Shape in = e.shape();
  return detail::arg_impl<false>(e, in, detail::reduce_dims(in, {int64_t(dim)}, keepdim, "argmin"), "argmin");
}

// ---- var, std, var_mean, std_mean: divide by max(0, N - correction); correction 1 is unbiased ---

#define KILN_VAR_OVERLOADS(name, impl, take_sqrt)                                                    \
  template <Operand X, std::same_as<bool> B> /* exactly bool, so that name(x, {1}) means dims */     \
  auto name(const X& x, B unbiased) {                                                                \
    const auto e = detail::reduce_node(x);                                                           \
    const Shape in = e.shape();                                                                      \
    return detail::impl(e, in, detail::reduce_all(in), unbiased ? 1.0 : 0.0, take_sqrt);            \
  }                                                                                                  \
  template <Operand X>                                                                               \
  auto name(const X& x) {                                                                            \
    return name(x, true);                                                                            \
  }                                                                                                  \
  template <Operand X>                                                                               \
  auto name(const X& x, const Dims& dims, double correction = 1, bool keepdim = false) {             \
    const auto e = detail::reduce_node(x);                                                           \
    const Shape in = e.shape();                                                                      \
    return detail::impl(e, in, detail::reduce_dims(in, dims, keepdim, #name), correction, take_sqrt); \
  }                                                                                                  \
  template <Operand X, DimIndex I>                                                                   \
  auto name(const X& x, I dim, double correction = 1, bool keepdim = false) {                        \
    return name(x, Dims{int64_t(dim)}, correction, keepdim);                                         \
  }
KILN_VAR_OVERLOADS(var, var_impl, false)
KILN_VAR_OVERLOADS(std, var_impl, true)
KILN_VAR_OVERLOADS(var_mean, var_mean_impl, false)
KILN_VAR_OVERLOADS(std_mean, var_mean_impl, true)
#undef KILN_VAR_OVERLOADS

// ---- norm: p = 2 (default), 1, inf, -inf, 0 (count of nonzeros) or any other p ------------------

namespace detail {
// The norm of all of x without its backward, for code that runs under no-grad (clip_grad_norm_): a file that calls
// norm() compiles the backward of every p as well (docs/performance.md).
template <Dtype T>
Tensor<T> untracked_norm(const Tensor<T>& x, double p) {
  const Shape in = x.shape();
  return norm_impl(Leaf<T>(x.impl_ptr()), in, reduce_all(in), p);
}
}  // namespace detail

template <Operand X>
auto norm(const X& x, double p = 2) {
  const auto e = detail::reduce_node(x);
  const Shape in = e.shape();
  return detail::norm_grad_impl(e, in, detail::reduce_all(in), p);
}
template <Operand X>
auto norm(const X& x, double p, const Dims& dims, bool keepdim = false) {
  const auto e = detail::reduce_node(x);
  const Shape in = e.shape();
  return detail::norm_grad_impl(e, in, detail::reduce_dims(in, dims, keepdim, "norm"), p);
}
template <Operand X, DimIndex I>
auto norm(const X& x, double p, I dim, bool keepdim = false) {
  return norm(x, p, Dims{int64_t(dim)}, keepdim);
}

// ---- cumsum and topk along one dim ---------------------------------------------------------------

namespace detail {
// [outer, n, inner] sizes of a contiguous shape around dim d.
inline std::array<int64_t, 3> split_at(const Shape& s, int d) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= s[i];
  for (int i = d + 1; i < s.size(); ++i) inner *= s[i];
  return {outer, s.size() ? s[d] : 1, inner};
}
#ifdef KILN_WITH_CUDA
// On the device (cuda/lines.hpp, which cuda/evaluate.hpp includes at its end, as it defines cuda_reduce).
template <Dtype T, Dtype Out>
void cuda_cumsum(const Tensor<T>& in, const Tensor<Out>& out, int64_t outer, int64_t n, int64_t inner);
template <Dtype T>
void cuda_topk(const Tensor<T>& in, const Tensor<T>& values, const Tensor<int64_t>& indices, int64_t outer, int64_t n,
               int64_t inner, int64_t k, bool largest);
#endif
template <Operand X>
auto contiguous_of(const X& x) {
  using T = typename X::value_type;
  if constexpr (TensorHandle<X>) return x.contiguous();
  else return Tensor<T>(x);
}
}  // namespace detail

// Running sums along dim; floats accumulate in double, integers and bools give int64.
template <Operand X, DimIndex I>
auto cumsum(const X& x, I dim) {
  using T = typename X::value_type;
  using Out = detail::sum_result_t<T>;
  using Acc = std::conditional_t<is_floating_v<T>, double, int64_t>;
  if constexpr (Expression<X>) detail::check_versions(x);
  const Tensor<T> in = detail::contiguous_of(x);
  const int d = wrap_dim(int64_t(dim), in.dim(), "cumsum");
  const auto [outer, n, inner] = detail::split_at(in.shape(), d);
  Tensor<Out> out(TensorImpl::allocate(in.shape(), scalar_type_of<Out>(), "cumsum", in.device()));
#ifdef KILN_WITH_CUDA
  if (in.is_cuda()) detail::cuda_cumsum(in, out, outer, n, inner);
  else
#endif
    cpu::cumsum<Acc>(in.data_ptr(), out.data_ptr(), outer, n, inner);
  if constexpr (is_floating_v<T>) {
    if (GradMode::is_enabled() && in.requires_grad()) {
      // The gradient of a running sum is the running sum from the end: total - cumsum(g) + g.
      auto formula = [d](const auto& g, const auto&, const auto&) {
        return detail::untracked(sum(g, Dims{d}, true) - cumsum(g, d) + g);
      };
      autograd::meta_of(out.impl_ptr()).grad_fn = std::make_shared<autograd::ReductionBackward<T, decltype(formula)>>(
          "CumsumBackward", in.impl_ptr(), out.impl_ptr(), in.shape(), formula);
    }
  }
  return out;
}

// The k largest (largest = false: smallest) values along dim and their int64 indices, sorted
// (the order is also sorted when sorted = false). NaN counts as larger than every number; equal
// values keep the lower index first. The values' gradient goes to the elements the indices name.
template <Operand X>
std::tuple<Tensor<typename X::value_type>, Tensor<int64_t>> topk(const X& x, int64_t k, int64_t dim = -1,
                                                                 bool largest = true, bool sorted = true) {
  using T = typename X::value_type;
  (void)sorted;
  if constexpr (Expression<X>) detail::check_versions(x);
  const Tensor<T> in = detail::contiguous_of(x);
  const int d = wrap_dim(dim, in.dim(), "topk");
  if (in.dim() == 0 && k == 1) {  // as a line of one element (the backward scatters along a dim)
    auto [values, indices] = topk(in.reshape({1}), k, 0, largest);
    return std::make_tuple(values.reshape({}), indices.reshape({}));
  }
  const auto [outer, n, inner] = detail::split_at(in.shape(), d);
  if (k < 0 || k > n)
    throw std::out_of_range(detail::cat("topk: k = ", k, " is out of range for dim ", d, " of size ", n,
                                        " (input shape ", in.shape(), ")"));
  Shape out_shape = in.shape();
  if (out_shape.size()) out_shape[d] = k;
  Tensor<T> values(TensorImpl::allocate(out_shape, scalar_type_of<T>(), "topk", in.device()));
  Tensor<int64_t> indices(TensorImpl::allocate(out_shape, ScalarType::Int64, "topk", in.device()));
#ifdef KILN_WITH_CUDA
  if (in.is_cuda()) detail::cuda_topk(in, values, indices, outer, n, inner, k, largest);
  else
#endif
    cpu::topk(in.data_ptr(), values.data_ptr(), indices.data_ptr(), outer, n, inner, k, largest);
  if constexpr (is_floating_v<T>) {
    // The values are gather(in, d, indices): gather's backward.
    if (GradMode::is_enabled() && in.requires_grad())
      autograd::meta_of(values.impl_ptr()).grad_fn =
          std::make_shared<autograd::GatherBackward<T>>(in.impl_ptr(), d, indices, "TopkBackward");
  }
  return std::make_tuple(values, indices);
}

// The values along dim in order (torch.sort / torch.argsort): ascending, or descending; NaN after every number
// ascending and before descending, equal values by index (a stable sort). topk of the whole dim, so its gradient
// too; on CUDA that kernel is O(n^2) per line (cuda/lines.hpp).
template <Operand X>
std::tuple<Tensor<typename X::value_type>, Tensor<int64_t>> sort(const X& x, int64_t dim = -1, bool descending = false) {
  const Shape shape = detail::reduce_node(x).shape();
  const int64_t n = shape.empty() ? 1 : shape[size_t(wrap_dim(dim, int(shape.size()), "sort"))];
  return topk(x, n, dim, descending);
}
template <Operand X>
Tensor<int64_t> argsort(const X& x, int64_t dim = -1, bool descending = false) {
  return std::get<1>(sort(x, dim, descending));
}

}  // namespace kiln

#pragma once
// Arithmetic on gradients as the engine and the view nodes need it: copy, add, sum over broadcast
// dims. Type-erased (a dtype switch over plain loops, not fused kernels): it is compiled once into
// every program that includes kiln, whatever expressions the program has.
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/autograd/meta.hpp"
#include "kiln/core/error.hpp"
#include "kiln/cpu/loop_plan.hpp"

namespace kiln::autograd {

// Calls f(T{}) for the floating dtype t (gradients are floating point).
template <class F>
void with_gradient_type(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::Float: return f(float{});
    case ScalarType::Double: return f(double{});
    case ScalarType::BFloat16: return f(bfloat16{});
    default: throw DTypeError(kiln::detail::cat("backward: gradients must be floating point, got ", dtype_name(t)));
  }
}

// dst = src elementwise, same dtype; src broadcasts to dst's shape.
inline void copy_elements(const TensorImpl& dst, const TensorImpl& src) {
  LoopPlan<2> plan;
  plan.set_shape(dst.shape);
  plan.set_operand(0, &dst, dst.shape);
  plan.set_operand(1, &src, dst.shape);
  plan.coalesce();
  const size_t es = element_size(dst.dtype);
  const int64_t dstep = plan.step[0][plan.rank - 1];
  cpu::for_each_row(plan, 0, plan.numel(), [&](char* d, const auto& c, int64_t j, int64_t stop) {
    if (dstep == int64_t(es) && c.step[0] == int64_t(es)) {
      std::memcpy(d + j * dstep, c.ptr[0] + j * c.step[0], size_t(stop - j) * es);
      return;
    }
    for (; j < stop; ++j) std::memcpy(d + j * dstep, c.ptr[0] + j * c.step[0], es);
  });
}

// A contiguous copy of a gradient.
inline ImplPtr copy_gradient(const TensorImpl& g) {
  ImplPtr out = TensorImpl::allocate(g.shape, g.dtype, "backward");
  copy_elements(*out, g);
  return out;
}

// a + b for gradients of one shape and dtype (null is zero); reuses a's memory when a is the only
// handle to it.
inline ImplPtr add_grads(const ImplPtr& a, const ImplPtr& b) {
  if (!a) return b;
  if (!b) return a;
  check<ShapeError>(a->shape == b->shape, "backward: gradients of shapes ", a->shape, " and ", b->shape,
                    " meet at one tensor");
  check(a->dtype == b->dtype, "backward: gradients of dtypes ", dtype_name(a->dtype), " and ", dtype_name(b->dtype),
        " cannot be added");
  ImplPtr sum = a.use_count() == 1 && a->is_contiguous() ? a : copy_gradient(*a);
  const ImplPtr other = b->is_contiguous() ? b : copy_gradient(*b);
  with_gradient_type(sum->dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(sum->data_bytes());
    const T* q = reinterpret_cast<const T*>(other->data_bytes());
    for (int64_t i = 0, n = sum->numel(); i < n; ++i) p[i] = T(compute_t<T>(p[i]) + compute_t<T>(q[i]));
  });
  return sum;
}

// The index of the first NaN or Inf in a gradient, or -1.
inline int64_t first_non_finite(const TensorImpl& g) {
  const ImplPtr dense = g.is_contiguous() ? nullptr : copy_gradient(g);
  const TensorImpl& t = dense ? *dense : g;
  int64_t found = -1;
  with_gradient_type(t.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = reinterpret_cast<const T*>(t.data_bytes());
    for (int64_t i = 0, n = t.numel(); i < n && found < 0; ++i)
      if (!std::isfinite(double(compute_t<T>(p[i])))) found = i;
  });
  return found;
}

// A contiguous copy of g times s.
inline ImplPtr scaled_gradient(const TensorImpl& g, double s) {
  ImplPtr out = copy_gradient(g);
  with_gradient_type(out->dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(out->data_bytes());
    for (int64_t i = 0, n = out->numel(); i < n; ++i) p[i] = T(compute_t<T>(double(compute_t<T>(p[i])) * s));
  });
  return out;
}

// The gradient g (of a broadcast result) summed to `target`, the shape that was broadcast: over
// the leading dims g has more and over the dims where target has size 1. Accumulates in double,
// in a fixed order (the same result for any thread count).
inline ImplPtr sum_to_shape(const ImplPtr& g, const Shape& target) {
  if (g->shape == target) return g;
  const int lead = g->shape.size() - target.size();
  check<ShapeError>(lead >= 0, "backward: a gradient of shape ", g->shape, " cannot be summed to shape ", target);
  Shape kept = g->shape;  // g's shape with the summed dims set to 1
  for (int i = 0; i < kept.size(); ++i)
    if (i < lead || target[i - lead] == 1) kept[i] = 1;
  std::vector<double> acc(size_t(numel_of(target)), 0.0);
  LoopPlan<2> plan;  // operand 0: acc, as a contiguous tensor of shape `kept` broadcast over g's shape
  plan.set_shape(g->shape);
  plan.set_operand(1, g.get(), g->shape);
  const Strides st = broadcast_strides(kept, contiguous_strides(kept), g->shape);
  for (int i = 0; i < g->shape.size(); ++i) plan.step[0][i] = st[i] * int64_t(sizeof(double));
  plan.base[0] = reinterpret_cast<char*>(acc.data());
  plan.coalesce();
  const int64_t astep = plan.step[0][plan.rank - 1];
  with_gradient_type(g->dtype, [&](auto tag) {
    using T = decltype(tag);
    cpu::for_each_row(plan, 0, plan.numel(), [&](char* a, const auto& c, int64_t j, int64_t stop) {
      for (; j < stop; ++j) *reinterpret_cast<double*>(a + j * astep) += double(load_value<T>(c.ptr[0] + j * c.step[0]));
    });
  });
  ImplPtr out = TensorImpl::allocate(target, g->dtype, "backward");
  with_gradient_type(g->dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(out->data_bytes());
    for (size_t i = 0; i < acc.size(); ++i) p[i] = T(compute_t<T>(acc[i]));
  });
  return out;
}

}  // namespace kiln::autograd

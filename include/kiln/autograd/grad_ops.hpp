#pragma once
// Arithmetic on gradients as the engine and the view nodes need it: copy, add, sum over broadcast
// dims. Type-erased (a dtype switch over plain loops, not fused kernels): compiled once per program,
// whatever expressions it has (in its compiled part with KILN_SEPARATE_COMPILATION).
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/autograd/meta.hpp"
#include "kiln/core/config.hpp"
#include "kiln/core/error.hpp"
#include "kiln/cpu/loop_plan.hpp"
#include "kiln/cpu/partial_sum.hpp"

namespace kiln::autograd {

// Calls f(T{}) for the floating dtype t (gradients are floating point).
template <class F>
void with_gradient_type(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::Float: return f(float{});
    case ScalarType::Double: return f(double{});
    case ScalarType::BFloat16: return f(bfloat16{});
    case ScalarType::Half: return f(float16{});
    default: throw DTypeError(kiln::detail::cat("backward: gradients must be floating point, got ", dtype_name(t)));
  }
}

// The same arithmetic on CUDA gradients, which the loops below must never read: typed kernels that
// cuda/autograd.hpp registers in builds with KILN_WITH_CUDA (<kiln/kiln.hpp> includes it there), so this file
// stays free of CUDA code. Each entry does what the function of its name below does.
struct DeviceGradientOps {
  void (*copy_elements)(const TensorImpl& dst, const TensorImpl& src);
  ImplPtr (*add_grads)(const ImplPtr& a, const ImplPtr& b);
  int64_t (*first_non_finite)(const TensorImpl& g);
  ImplPtr (*scaled_gradient)(const TensorImpl& g, double s);
  ImplPtr (*sum_to_shape)(const ImplPtr& g, const Shape& target);
};

inline const DeviceGradientOps*& device_gradient_ops() {
  static const DeviceGradientOps* ops = nullptr;
  return ops;
}

// The registered operations for a gradient on `device`, or an error saying what the build lacks.
inline const DeviceGradientOps& gradient_ops_on(const Device& device) {
  const DeviceGradientOps* ops = device_gradient_ops();
  check<std::logic_error>(ops != nullptr, "backward: a gradient on ", device.str(), " needs kiln's CUDA autograd, which "
                          "a program built with KILN_WITH_CUDA gets from <kiln/kiln.hpp>");
  return *ops;
}

// dst = src elementwise, same dtype; src broadcasts to dst's shape.
KILN_DECL void copy_elements(const TensorImpl& dst, const TensorImpl& src);

// A zeroed contiguous gradient of `shape` on `device`.
KILN_DECL ImplPtr zero_gradient(const Shape& shape, ScalarType dtype, Device device);

// A contiguous copy of a gradient.
KILN_DECL ImplPtr copy_gradient(const TensorImpl& g);

// a + b for gradients of one shape and dtype (null is zero); reuses a's memory when nothing else
// refers to it (neither another handle to a nor a view of its storage, as a reshaped gradient is).
KILN_DECL ImplPtr add_grads(const ImplPtr& a, const ImplPtr& b);

// The index of the first NaN or Inf in a gradient, or -1.
KILN_DECL int64_t first_non_finite(const TensorImpl& g);

// A contiguous copy of g times s.
KILN_DECL ImplPtr scaled_gradient(const TensorImpl& g, double s);

namespace detail {

// sum_to_shape's layout: g's dims with size-1 dims dropped and neighbours merged, each either summed or
// kept (kept ones carry their stride in the accumulator, which is laid out in target's order).
struct SumSegment {
  int64_t size;
  bool kept;
  int64_t acc_stride;
};

inline std::vector<SumSegment> sum_segments(const Shape& g, const Shape& target) {
  const int lead = g.size() - target.size();
  std::vector<SumSegment> segs;
  for (int i = 0; i < g.size(); ++i) {
    if (g[i] == 1) continue;
    const bool kept = i >= lead && target[i - lead] != 1;
    if (!segs.empty() && segs.back().kept == kept) segs.back().size *= g[i];  // g is contiguous: merge
    else segs.push_back({g[i], kept, 0});
  }
  if (segs.empty()) segs.push_back({1, true, 0});
  int64_t stride = 1;
  for (auto it = segs.rbegin(); it != segs.rend(); ++it)
    if (it->kept) {
      it->acc_stride = stride;
      stride *= it->size;
    }
  return segs;
}

}  // namespace detail

// The gradient g (of a broadcast result) summed to `target`, the shape that was broadcast: over
// the leading dims g has more and over the dims where target has size 1. Accumulates in double,
// in a fixed order (the same result for any thread count). g is walked once, contiguously: runs of
// its innermost segment are either summed into one accumulator or added onto a row of them.
KILN_DECL ImplPtr sum_to_shape(const ImplPtr& g_in, const Shape& target);


#if KILN_HEADER_DEFINITIONS
KILN_DECL void copy_elements(const TensorImpl& dst, const TensorImpl& src) {
  if (dst.device().is_cuda()) return gradient_ops_on(dst.device()).copy_elements(dst, src);
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

KILN_DECL ImplPtr copy_gradient(const TensorImpl& g) {
  ImplPtr out = TensorImpl::allocate(g.shape, g.dtype, "backward", g.device());
  copy_elements(*out, g);
  return out;
}

KILN_DECL ImplPtr zero_gradient(const Shape& shape, ScalarType dtype, Device device) {
  ImplPtr out = TensorImpl::allocate(shape, dtype, "backward", device);
  const size_t bytes = size_t(out->numel()) * element_size(dtype);
  if (device.is_cpu()) std::memset(out->data_bytes(), 0, bytes);
  else if (bytes) kiln::detail::require_cuda("backward").zero(out->device_bytes(), device, bytes);
  return out;
}

KILN_DECL ImplPtr add_grads(const ImplPtr& a, const ImplPtr& b) {
  if (!a) return b;
  if (!b) return a;
  check<ShapeError>(a->shape == b->shape, "backward: gradients of shapes ", a->shape, " and ", b->shape,
                    " meet at one tensor");
  check(a->dtype == b->dtype, "backward: gradients of dtypes ", dtype_name(a->dtype), " and ", dtype_name(b->dtype),
        " cannot be added");
  check(a->device() == b->device(), "backward: gradients on ", a->device().str(), " and ", b->device().str(),
        " meet at one tensor");
  if (a->device().is_cuda()) return gradient_ops_on(a->device()).add_grads(a, b);
  ImplPtr sum = a.use_count() == 1 && a->storage.use_count() == 1 && a->is_contiguous() ? a : copy_gradient(*a);
  const ImplPtr other = b->is_contiguous() ? b : copy_gradient(*b);
  with_gradient_type(sum->dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(sum->data_bytes());
    const T* q = reinterpret_cast<const T*>(other->data_bytes());
    for (int64_t i = 0, n = sum->numel(); i < n; ++i) p[i] = T(compute_t<T>(p[i]) + compute_t<T>(q[i]));
  });
  return sum;
}

KILN_DECL int64_t first_non_finite(const TensorImpl& g) {
  if (g.device().is_cuda()) return gradient_ops_on(g.device()).first_non_finite(g);
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

KILN_DECL ImplPtr scaled_gradient(const TensorImpl& g, double s) {
  if (g.device().is_cuda()) return gradient_ops_on(g.device()).scaled_gradient(g, s);
  ImplPtr out = copy_gradient(g);
  with_gradient_type(out->dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(out->data_bytes());
    for (int64_t i = 0, n = out->numel(); i < n; ++i) p[i] = T(compute_t<T>(double(compute_t<T>(p[i])) * s));
  });
  return out;
}

KILN_DECL ImplPtr sum_to_shape(const ImplPtr& g_in, const Shape& target) {
  if (g_in->shape == target) return g_in;
  const int lead = g_in->shape.size() - target.size();
  check<ShapeError>(lead >= 0, "backward: a gradient of shape ", g_in->shape, " cannot be summed to shape ", target);
  for (int i = 0; i < target.size(); ++i)
    check<ShapeError>(target[i] == 1 || target[i] == g_in->shape[i + lead], "backward: a gradient of shape ",
                      g_in->shape, " cannot be summed to shape ", target);
  if (g_in->device().is_cuda()) return gradient_ops_on(g_in->device()).sum_to_shape(g_in, target);
  std::vector<double> acc(size_t(numel_of(target)), 0.0);
  const ImplPtr g = g_in->numel() == 0 || g_in->is_contiguous() ? g_in : copy_gradient(*g_in);
  const std::vector<detail::SumSegment> segs = detail::sum_segments(g->shape, target);
  const detail::SumSegment inner = segs.back();
  const size_t outer_rank = segs.size() - 1;
  std::vector<int64_t> index(outer_rank, 0);
  const int64_t runs = inner.size == 0 ? 0 : g->numel() / inner.size;
  with_gradient_type(g->dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = reinterpret_cast<const T*>(g->data_bytes());
    int64_t acc_base = 0;
    for (int64_t r = 0; r < runs; ++r, p += inner.size) {
      if (inner.kept) {
        double* a = acc.data() + acc_base;
        for (int64_t i = 0; i < inner.size; ++i) a[i] += double(compute_t<T>(p[i]));
      } else {
        acc[size_t(acc_base)] += cpu::partial_sum(inner.size, [p](int64_t i) { return double(compute_t<T>(p[i])); });
      }
      for (size_t d = outer_rank; d-- > 0;) {  // the odometer over the outer segments
        acc_base += segs[d].acc_stride;
        if (++index[d] < segs[d].size) break;
        acc_base -= segs[d].acc_stride * segs[d].size;
        index[d] = 0;
      }
    }
  });
  ImplPtr out = TensorImpl::allocate(target, g->dtype, "backward");
  with_gradient_type(g->dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(out->data_bytes());
    for (size_t i = 0; i < acc.size(); ++i) p[i] = T(compute_t<T>(acc[i]));
  });
  return out;
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln::autograd

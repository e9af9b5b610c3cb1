#pragma once
// The node recorded when an expression with a leaf that requires grad is materialized (or
// reduced): one node for the whole tree, whose backward is one fused pass (autograd/derive.hpp)
// writing every leaf's gradient; a broadcast leaf's gradient is summed over its broadcast dims.
#include <optional>
#include <sstream>

#include "kiln/autograd/derive.hpp"
#include "kiln/autograd/engine.hpp"
#include "kiln/tensor/reduce.hpp"

namespace kiln::autograd {

namespace detail {

// "mul(t0, sin(t1))": the expression a node came from, for grad_fn names and anomaly reports.
template <class T>
void describe(std::ostream& out, const Leaf<T>&, int& leaf) { out << 't' << leaf++; }
template <class T>
void describe(std::ostream& out, const Scalar<T>& s, int&) { out << s.value; }
template <class Op, class... A>
void describe(std::ostream& out, const Map<Op, A...>& m, int& leaf) {
  out << Op::name << '(';
  bool first = true;
  std::apply([&](const auto&... a) { ((out << (first ? "" : ", "), first = false, describe(out, a, leaf)), ...); }, m.args);
  out << ')';
}

// Writes each leaf's adjoint into its gradient buffer (a null pointer: the leaf needs none).
// The buffers are contiguous in the iteration's layout, so only a row's tail needs the buffered store.
template <int N, class C>
struct SimdGradSink {
  const C& c;
  int64_t j;
  size_t count;
  template <int I, class T, class V>
  HWY_INLINE void leaf(const V& adj) {
    if constexpr (is_floating_v<T>) {
      char* p = const_cast<char*>(c.ptr[N + I]);
      if (!p) return;
      const hwy::HWY_NAMESPACE::ScalableTag<hwy::HWY_NAMESPACE::TFromV<V>> d;
      kiln::HWY_NAMESPACE::store_vector<T>(d, adj, p, c.step[N + I], j, count);
    }
  }
};

template <int N, class C>
struct ScalarGradSink {
  const C& c;
  int64_t j;
  template <int I, class T, class V>
  void leaf(const V& adj) {
    if constexpr (is_floating_v<T>) {
      char* p = const_cast<char*>(c.ptr[N + I]);
      if (p) store_value<T>(p + j * c.step[N + I], compute_t<T>(adj));
    }
  }
};

}  // namespace detail

// The backward of one fused expression E. `expanded` is the shape of the incoming gradient with
// every reduced dim kept (size 1); it broadcasts to the expression's shape (for a plain
// materialization it is the expression's shape).
template <class E>
struct FusedBackward : Node {
  static constexpr int N = leaf_count_v<E>;

  FusedBackward(const E& e, Shape expr_shape, Shape expanded, std::string kind)
      : expr(e), shape(std::move(expr_shape)), grad_shape(std::move(expanded)), kind_(std::move(kind)) {
    int k = 0;
    for_each_leaf(e, [&](const auto& leaf) {
      next_edges.push_back(gradient_reaches<E>[k++] ? gradient_edge(leaf.impl) : Edge{});
    });
  }

  std::string name() const override {
    std::ostringstream out;
    out << kind_ << '(';
    int leaf = 0;
    if (expr) detail::describe(out, *expr, leaf);
    out << ')';
    return out.str();
  }

  void release_saved() override { expr.reset(); }

  GradList apply(GradList&& grads) override {
    ImplPtr g = grads.at(0);
    if (!g || !expr) return GradList(N);
    check_saved_versions();
    std::vector<ImplPtr> leaves;
    for_each_leaf(*expr, [&](const auto& leaf) { leaves.push_back(leaf.impl); });

    // One gradient buffer of the expression's shape per leaf that needs one.
    GradList buffers(N);
    for (int k = 0; k < N; ++k)
      if (next_edges[k].valid()) buffers[k] = TensorImpl::allocate(shape, leaves[k]->dtype, "backward");
    if (numel_of(shape) > 0) run_kernel(*g, leaves, buffers);

    // Reduce broadcast leaves to their shapes; a tensor that appears as several leaves (a * a)
    // gets one gradient, the sum of its leaves' (the engine would add them too, one edge each).
    GradList out(N);
    int k = 0;
    for_each_leaf(*expr, [&](const auto& leaf) {
      using T = typename std::remove_cvref_t<decltype(leaf)>::value_type;
      if constexpr (is_floating_v<T>) {
        if (buffers[k]) out[k] = sum_to_shape<T>(buffers[k], leaves[k]->shape);
      }
      ++k;
    });
    return out;
  }

  std::optional<E> expr;
  Shape shape;
  Shape grad_shape;

 private:
  void check_saved_versions() const {
    for_each_leaf(*expr, [&](const auto& leaf) {
      if (leaf.impl->version() != leaf.version)
        throw StaleExpressionError(kiln::detail::cat(
            "backward: a tensor of shape ", leaf.impl->shape, " saved by ", name(),
            " was modified in place after the forward pass (version ", leaf.version, ", now ", leaf.impl->version(),
            "); clone it before modifying it"));
    });
  }

  // Operand 0: the incoming gradient; 1..N: the leaves; N+1..2N: the gradient buffers.
  void run_kernel(const TensorImpl& g, const std::vector<ImplPtr>& leaves, const GradList& buffers) const {
    LoopPlan<2 * N + 1> plan;
    plan.rank = shape.size();
    for (int i = 0; i < shape.size(); ++i) plan.shape[i] = shape[i];
    TensorImpl g_view = g;  // the incoming gradient with reduced dims kept, broadcast to shape
    g_view.shape = grad_shape;
    g_view.strides = contiguous_strides(grad_shape);
    check<ShapeError>(g.is_contiguous() || g.shape == grad_shape, "backward: unexpected gradient layout");
    if (g.shape == grad_shape) g_view.strides = g.strides;
    plan.base[0] = g_view.data_bytes();
    set_operand(plan.step[0], g_view, shape);
    for (int k = 0; k < N; ++k) {
      plan.base[1 + k] = leaves[k]->data_bytes();
      set_operand(plan.step[1 + k], *leaves[k], shape);
      if (buffers[k]) {
        plan.base[1 + N + k] = buffers[k]->data_bytes();
        set_operand(plan.step[1 + N + k], *buffers[k], shape);
      }
    }
    plan.coalesce();
    const int64_t gstep = plan.step[0][plan.rank - 1];
    using GT = typename E::value_type;
    constexpr int64_t cost = 3 * tree_traits<E>::cost + 2 * N + 1;
    const E& e = *expr;
    cpu::parallel_for(plan.numel(), cost, 64, [&](int64_t begin, int64_t end) {
      cpu::for_each_row(plan, begin, end, [&](char* gptr, const auto& c, int64_t j, int64_t stop) {
        namespace kh = kiln::HWY_NAMESPACE;
        using C = std::remove_cvref_t<decltype(c)>;
        if constexpr (cpu::is_simd_v<E>) {
          const hwy::HWY_NAMESPACE::ScalableTag<typename kh::simd_plan<E>::lane> d;
          const int64_t lanes = int64_t(hwy::HWY_NAMESPACE::Lanes(d));
          for (; j < stop; j += lanes) {
            const size_t count = size_t(std::min(lanes, stop - j));
            const kh::SimdSweep<decltype(d), C> sweep{d, c, j, count};
            const auto tape = kh::tape_forward<0>(e, sweep);
            detail::SimdGradSink<N, C> sink{c, j, count};
            kh::tape_backward<0>(e, sweep, tape, kh::load_leaf<GT>(d, gptr, gstep, j, count), sink);
          }
        } else {
          for (; j < stop; ++j) {
            const kh::ScalarSweep<C> sweep{c, j};
            const auto tape = kh::tape_forward<0>(e, sweep);
            detail::ScalarGradSink<N, C> sink{c, j};
            kh::tape_backward<0>(e, sweep, tape, load_value<GT>(gptr + j * gstep), sink);
          }
        }
      });
    });
  }

  // Sums a gradient of the expression's shape over the dims where the leaf was broadcast.
  template <class T>
  static ImplPtr sum_to_shape(const ImplPtr& grad, const Shape& leaf_shape) {
    if (grad->shape == leaf_shape) return grad;
    const int lead = grad->shape.size() - leaf_shape.size();
    Dims dims;
    for (int i = 0; i < grad->shape.size(); ++i)
      if (i < lead || (leaf_shape[i - lead] == 1 && grad->shape[i] != 1)) dims.push_back(i);
    return sum(Tensor<T>(grad), dims, true).reshape(leaf_shape).impl_ptr();
  }

  std::string kind_;
};

// True when grad mode is on and some leaf of the expression requires grad.
template <class E>
bool needs_graph(const E& e) {
  if (!GradMode::is_enabled() || !is_floating_v<typename E::value_type>) return false;
  bool any = false;
  int k = 0;
  for_each_leaf(e, [&](const auto& leaf) { any |= gradient_reaches<E>[k++] && requires_grad(*leaf.impl); });
  return any;
}

// Makes `out` the output of a FusedBackward node for e.
template <class E>
void record_fused(const E& e, const ImplPtr& out, const Shape& expr_shape, const Shape& expanded_grad_shape,
                  const char* kind) {
  auto node = std::make_shared<FusedBackward<E>>(e, expr_shape, expanded_grad_shape, kind);
  AutogradMeta& meta = meta_of(out);
  meta.grad_fn = std::move(node);
  meta.output_nr = 0;
}

}  // namespace kiln::autograd

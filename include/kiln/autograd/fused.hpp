#pragma once
// The node recorded when an expression with a leaf that requires grad is materialized (or
// reduced): one node for the whole tree, whose backward is one fused pass (autograd/derive.hpp)
// writing every leaf's gradient; a broadcast leaf's gradient is summed over its broadcast dims.
//
// Everything but the kernel lives in FusedNode, compiled once; FusedBackward<E> adds the kernel
// and the saved expression, so an expression costs little more to compile than its forward.
#include <sstream>

#include "kiln/autograd/derive.hpp"
#include "kiln/autograd/engine.hpp"

namespace kiln::autograd {

struct FusedNode : Node {
  // `reaches[k]`: whether leaf k can get a gradient; `expanded`: the shape of the incoming gradient
  // with reduced dims kept as 1 (it broadcasts to `shape`, the expression's shape); `scale`
  // multiplies it (1 / count for a mean).
  FusedNode(const std::vector<ImplPtr>& leaves, const bool* reaches, Shape shape, Shape expanded, std::string kind,
            double scale)
      : shape_(std::move(shape)),
        grad_shape_(std::move(expanded)),
        kind_(std::move(kind)),
        scale_(scale) {
    for (size_t k = 0; k < leaves.size(); ++k) {
      next_edges.push_back(reaches[k] ? gradient_edge(leaves[k]) : Edge{});
      leaves_.emplace_back(leaves[k]);
      // A tensor that appears as several leaves (a * a) gets one buffer: its first leaf stores its
      // gradient there and the others add theirs (not through staging: float and double only).
      owner_.push_back(int(k));
      const bool plain = leaves[k]->dtype == ScalarType::Float || leaves[k]->dtype == ScalarType::Double;
      for (size_t j = 0; j < k && plain && next_edges[k].valid(); ++j)
        if (leaves[j] == leaves[k] && next_edges[j].valid()) {
          owner_[k] = int(j);
          break;
        }
    }
  }

  std::string name() const override {
    std::ostringstream out;
    out << kind_ << '(';
    describe(out);
    out << ')';
    return out.str();
  }

  void release_saved() override { leaves_.clear(); }

  GradList apply(GradList&& grads) override {
    const size_t n = next_edges.size();
    ImplPtr g = grads.at(0);
    if (!g || leaves_.empty()) return GradList(n);
    for (const SavedTensor& leaf : leaves_) leaf.unpack(*this);
    if (g->shape != grad_shape_ && !(g->is_contiguous() && g->numel() == numel_of(grad_shape_)))
      throw ShapeError(kiln::detail::cat("backward: ", name(), " got a gradient of shape ", g->shape, ", expected ",
                                         grad_shape_));
    if (g->shape != grad_shape_) g = g->view_as(grad_shape_, contiguous_strides(grad_shape_), g->offset);
    if (scale_ != 1) g = scaled_gradient(*g, scale_);
    // One gradient buffer of the expression's shape per tensor that needs one; leaf k writes to
    // buffer owner_[k].
    GradList buffers(n), targets(n);
    bool accumulate[kMaxOperands] = {};
    for (size_t k = 0; k < n; ++k) {
      if (!next_edges[k].valid()) continue;
      if (owner_[k] == int(k)) buffers[k] = TensorImpl::allocate(shape_, leaves_[k].impl->dtype, "backward");
      targets[k] = buffers[owner_[k]];
      accumulate[k] = owner_[k] != int(k);
    }
    if (numel_of(shape_) > 0) run_kernel(*g, targets, accumulate);
    // A broadcast leaf's gradient is summed to its shape.
    for (size_t k = 0; k < n; ++k)
      if (buffers[k]) buffers[k] = sum_to_shape(buffers[k], leaves_[k].impl->shape);
    return buffers;
  }

 protected:
  virtual void describe(std::ostream& out) const = 0;
  // Writes each leaf's gradient (of the expression's shape) to buffers[k] (null: not needed), adding
  // to what is there where accumulate[k].
  virtual void run_kernel(const TensorImpl& g, const GradList& buffers, const bool* accumulate) const = 0;

  // The kernel's plan: operand 0 the incoming gradient, 1..N the leaves, N+1..2N the buffers.
  template <int N>
  LoopPlan<2 * N + 1> backward_plan(const TensorImpl& g, const GradList& buffers) const {
    LoopPlan<2 * N + 1> plan;
    plan.set_shape(shape_);
    plan.set_operand(0, &g, shape_);
    for (int k = 0; k < N; ++k) {
      plan.set_operand(1 + k, leaves_[k].impl.get(), shape_);
      plan.set_operand(1 + N + k, buffers[k].get(), shape_);
    }
    plan.coalesce();
    return plan;
  }

  std::vector<SavedTensor> leaves_;
  std::vector<int> owner_;
  Shape shape_;
  Shape grad_shape_;
  std::string kind_;
  double scale_ = 1;
};

namespace detail {

// "mul(t0, sin(t1))": the expression a node came from, for grad_fn names and error messages.
template <class T>
void describe(std::ostream& out, const Leaf<T>&, int& leaf) { out << 't' << leaf++; }
template <class T>
void describe(std::ostream& out, const Scalar<T>& s, int&) { out << s.value; }
template <class Op, class... A>
void describe(std::ostream& out, const Map<Op, A...>& m, int& leaf) {
  out << Op::name << '(';
  bool first = true;
  apply_args(m.args, [&](const auto&... a) { ((out << (first ? "" : ", "), first = false, describe(out, a, leaf)), ...); });
  out << ')';
}

}  // namespace detail

// What a backward kernel reads besides its arrays.
template <class E>
struct BackwardContext {
  const E* expr;
  const bool* accumulate;  // per leaf: add to its gradient array instead of storing
};

}  // namespace kiln::autograd

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {

// Stores each leaf's adjoint into its gradient array (operand N + I; null: not needed).
template <int N, class D>
struct SimdGradSink {
  D d;
  char* const* ptr;
  const bool* accumulate;
  int64_t j;
  template <int I, class T, class V>
  HWY_INLINE void leaf(const V& adj) {
    if constexpr (is_floating_v<T>) {
      auto* p = reinterpret_cast<hn::TFromD<D>*>(ptr[N + I]);
      if (!p) return;
      hn::StoreU(accumulate[I - 1] ? hn::Add(hn::LoadU(d, p + j), adj) : adj, d, p + j);
    }
  }
};

template <class E>
void simd_backward_kernel(const void* context, char* const* ptr, int64_t n) {
  const auto& ctx = *static_cast<const autograd::BackwardContext<E>*>(context);
  const E& e = *ctx.expr;
  using L = typename simd_plan<E>::lane;
  constexpr int N = leaf_count_v<E>;
  const hn::ScalableTag<L> d;
  // Local copies the compiler can keep in registers across the stores.
  char* p[2 * N + 1];
  for (int k = 0; k <= 2 * N; ++k) p[k] = ptr[k];
  bool accumulate[N];
  for (int k = 0; k < N; ++k) accumulate[k] = ctx.accumulate[k];
  for (int64_t j = 0; j < n; j += int64_t(hn::Lanes(d))) {
    const SimdSweep<decltype(d)> sweep{d, p, j};
    const auto tape = tape_forward<1>(e, sweep);
    SimdGradSink<N, decltype(d)> sink{d, p, accumulate, j};
    tape_backward<1>(e, sweep, tape, hn::LoadU(d, reinterpret_cast<const L*>(p[0]) + j), sink);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();

namespace kiln::autograd {

namespace detail {

template <int N>
struct ScalarGradSink {
  char* const* ptr;
  const bool* accumulate;
  int64_t j;
  template <int I, class T, class V>
  void leaf(const V& adj) {
    if constexpr (is_floating_v<T>) {
      auto* p = reinterpret_cast<compute_t<T>*>(ptr[N + I]);
      if (p) p[j] = accumulate[I - 1] ? p[j] + compute_t<T>(adj) : compute_t<T>(adj);
    }
  }
};

template <class E>
void scalar_backward_kernel(const void* context, char* const* ptr, int64_t n) {
  const auto& ctx = *static_cast<const BackwardContext<E>*>(context);
  const E& e = *ctx.expr;
  using G = compute_t<typename E::value_type>;
  for (int64_t j = 0; j < n; ++j) {
    const kiln::HWY_NAMESPACE::ScalarSweep sweep{ptr, j};
    const auto tape = kiln::HWY_NAMESPACE::tape_forward<1>(e, sweep);
    ScalarGradSink<leaf_count_v<E>> sink{ptr, ctx.accumulate, j};
    kiln::HWY_NAMESPACE::tape_backward<1>(e, sweep, tape, reinterpret_cast<const G*>(ptr[0])[j], sink);
  }
}

// Operand types of E's backward kernel: the incoming gradient, the leaves, their gradients.
template <class E>
constexpr auto backward_operands() {
  constexpr int N = leaf_count_v<E>;
  const auto leaves = cpu::kernel_operands<E>(std::array<ScalarType, 0>{});
  std::array<cpu::OperandType, 2 * N + 1> types{};
  constexpr ScalarType g = scalar_type_of<typename E::value_type>();
  types[0] = {g, cpu::kernel_dtype<E>(g), false};
  for (int k = 0; k < N; ++k) {
    types[1 + k] = leaves[k];
    types[1 + N + k] = {leaves[k].stored, leaves[k].kernel, true};
  }
  return types;
}

}  // namespace detail

// The backward of one fused expression E.
template <class E>
struct FusedBackward final : FusedNode {
  static constexpr int N = leaf_count_v<E>;

  FusedBackward(const E& e, const std::vector<ImplPtr>& leaves, Shape shape, Shape expanded, std::string kind,
                double scale)
      : FusedNode(leaves, gradient_reaches<E>.data(), std::move(shape), std::move(expanded), std::move(kind), scale),
        expr_(e) {}

  void release_saved() override {
    FusedNode::release_saved();
    release_leaves(expr_);
  }

 private:
  void describe(std::ostream& out) const override {
    int leaf = 0;
    detail::describe(out, expr_, leaf);
  }

  void run_kernel(const TensorImpl& g, const GradList& buffers, const bool* accumulate) const override {
    static constexpr auto types = detail::backward_operands<E>();
    cpu::KernelDesc kernel;
    if constexpr (cpu::is_simd_v<E>)
      kernel = {&kiln::HWY_NAMESPACE::simd_backward_kernel<E>, kiln::HWY_NAMESPACE::simd_lanes<E>()};
    else
      kernel = {&detail::scalar_backward_kernel<E>, 1};
    const BackwardContext<E> context{&expr_, accumulate};
    cpu::run_plan(backward_plan<N>(g, buffers), types.data(), kernel, &context, 3 * tree_traits<E>::cost + 2 * N + 1);
  }

  E expr_;  // (not std::optional: its instantiation per expression cost 0.07 s of compile time each)
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

// Makes `out` the output of a FusedBackward node for e: out = e materialized, or a sum or mean of e
// (expanded_grad_shape is then out's shape with the reduced dims kept as 1, scale 1 / count for a mean).
template <class E>
void record_fused(const E& e, const ImplPtr& out, const Shape& expr_shape, const Shape& expanded_grad_shape,
                  const char* kind, double scale) {
  std::vector<ImplPtr> leaves;
  for_each_leaf(e, [&](const auto& leaf) { leaves.push_back(leaf.impl); });
  AutogradMeta& meta = meta_of(out);
  meta.grad_fn = std::make_shared<FusedBackward<E>>(e, leaves, expr_shape, expanded_grad_shape, kind, scale);
  meta.output_nr = 0;
}

}  // namespace kiln::autograd

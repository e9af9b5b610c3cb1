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
#include "kiln/core/config.hpp"

namespace kiln::autograd {

struct FusedNode : Node {
  // `reaches[k]`: whether leaf k can get a gradient; `expanded`: the shape of the incoming gradient
  // with reduced dims kept as 1 (it broadcasts to `shape`, the expression's shape); `scale`
  // multiplies it (1 / count for a mean).
  KILN_DECL FusedNode(const ImplPtr* const* leaves, size_t n, const bool* reaches, Shape shape, Shape expanded,
                      std::string kind, double scale);
  KILN_DECL std::string name() const override;
  KILN_DECL void release_saved() override;
  KILN_DECL GradList apply(GradList&& grads) override;

 protected:
  virtual void describe(std::ostream& out) const = 0;
  // Writes to buffers[k] (null: none) the gradient of the tensor that is leaf k (of the expression's shape): leaf
  // k's adjoint plus those of the later leaves in later[k] (bit j: leaf j), the same tensor.
  virtual void run_kernel(const TensorImpl& g, const GradList& buffers, const uint64_t* later) const = 0;

  // The kernel's plan: operand 0 the incoming gradient, 1..N the leaves, N+1..2N the buffers, then the saved
  // output where the kernel reads the root's value from it (kOutput).
  template <int N, bool kOutput>
  LoopPlan<2 * N + 1 + kOutput> backward_plan(const TensorImpl& g, const GradList& buffers) const {
    LoopPlan<2 * N + 1 + kOutput> plan;
    plan.set_shape(shape_);
    plan.set_operand(0, &g, shape_);
    for (int k = 0; k < N; ++k) {
      plan.set_operand(1 + k, leaves_[k].tensor.impl.get(), shape_);
      plan.set_operand(1 + N + k, buffers[k].get(), shape_);
    }
    if constexpr (kOutput) plan.set_operand(2 * N + 1, output_.unpack(*this).get(), shape_);
    plan.coalesce();
    return plan;
  }

  struct SavedLeaf {
    SavedTensor tensor;
    bool owns_buffer;  // the tensor's first leaf with a gradient: its buffer gets the adjoints of all of them
    uint64_t later;    // for an owner, the later leaves that are the same tensor (bit j: leaf j)
  };
  std::vector<SavedLeaf> leaves_;
  SavedTensor output_;  // the materialized output, where the root's derivative reads it (FusedBackward<E, true>)
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

// Whether a materialized expression's backward reads the root's value y from the output instead of recomputing
// it: where the root's derivative reads y (exp, sigmoid, tanh, sqrt, ...), the stored output is the computed
// value (float, double), and the tree is costly enough that the backward is bound by its arithmetic rather than
// by its arrays, since the output is one more array to read. Measured (2026-12-01, AVX-512, 1M floats): the
// bench_autograd Math chain (cost 88) 12% faster; the Arith chain (cost 36, sigmoid at the root) 14% slower.
struct OutputMark {};
template <class E>
struct mentions_output : std::false_type {};
template <class T>
struct mentions_output<Value<OutputMark, T>> : std::true_type {};
template <class Op, class... A>
struct mentions_output<Map<Op, A...>> : std::bool_constant<(mentions_output<A>::value || ...)> {};
template <class... G>
struct mentions_output<std::tuple<G...>> : std::bool_constant<(mentions_output<std::remove_cvref_t<G>>::value || ...)> {};

// Called with placeholders of the types the fused backward binds (derive.hpp): the children's, then y and the
// adjoint of the node's type T.
template <class T, class Op, class... A>
constexpr bool grad_reads_output() {
  using R = decltype(Op::grad(Value<double, typename A::value_type>(0)..., Value<OutputMark, T>({}),
                              Value<double, T>(0)));
  return mentions_output<std::remove_cvref_t<R>>::value;
}
inline constexpr int kComputeBoundCost = 64;
template <class E>
struct root_from_output : std::false_type {};
template <class Op, class... A>
struct root_from_output<Map<Op, A...>> {
  static constexpr bool compute() {
    using T = typename Map<Op, A...>::value_type;
    using E = Map<Op, A...>;
    // (The output is one more operand of the backward loop: a tree with the most leaves keeps recomputing.)
    if constexpr (!ops::is_differentiable<Op>() || !(std::is_same_v<T, float> || std::is_same_v<T, double>) ||
                  tree_traits<E>::cost < kComputeBoundCost || 2 * tree_traits<E>::leaves + 2 > kMaxOperands)
      return false;
    else
      return grad_reads_output<T, Op, A...>();
  }
  static constexpr bool value = compute();
};
}  // namespace detail

// What a backward kernel reads besides its arrays.
template <class E>
struct BackwardContext {
  const E* expr;
  const uint64_t* later;  // per leaf: the later leaves whose adjoints its gradient array also gets (FusedNode)
};

}  // namespace kiln::autograd

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {

// Collects the leaves' adjoints at one position (a SIMD vector or one element) and stores them: leaf k's
// gradient array (buffer[k], null: not needed) gets its own adjoint plus those of the later leaves that are the
// same tensor (bit j of later[k]). Summed in registers, so a tensor that is several leaves (x * w + x) is written once.
template <int N, class V>
struct GradientSums {
  V adj[N];
  template <int I, class T, class A>
  HWY_INLINE void leaf(const A& a) {
    if constexpr (is_floating_v<T>) adj[I - 1] = V(a);
  }
  template <class Store>
  HWY_INLINE void store(char* const* buffer, const uint64_t* later, Store&& store_at) const {
    [&]<int... K>(std::integer_sequence<int, K...>) {
      const auto one = [&](auto k_constant) {
        constexpr int k = decltype(k_constant)::value;
        if (!buffer[k]) return;
        V sum = adj[k];
        // (Tested first: a leaf that no later leaf shares a tensor with costs one branch, not N.)
        if (later[k]) ((K > k && (later[k] >> K & 1) ? void(sum = sum + adj[K]) : void()), ...);
        store_at(k_constant, buffer[k], sum);
      };
      (one(std::integral_constant<int, K>{}), ...);
    }(std::make_integer_sequence<int, N>{});
  }
};

// kOutput: operand 2N + 1 is the stored output, the root's value.
template <class E, bool kOutput>
void simd_backward_kernel(const void* context, char* const* ptr, int64_t n) {
  const auto& ctx = *static_cast<const autograd::BackwardContext<E>*>(context);
  const E& e = *ctx.expr;
  using L = typename simd_plan<E>::lane;
  constexpr int N = leaf_count_v<E>;
  const hn::ScalableTag<L> d;
  // Local copies the compiler can keep in registers across the stores.
  char* p[2 * N + 1 + kOutput];
  for (int k = 0; k <= 2 * N + kOutput; ++k) p[k] = ptr[k];
  uint64_t later[N];
  for (int k = 0; k < N; ++k) later[k] = ctx.later[k];
  for (int64_t j = 0; j < n; j += int64_t(hn::Lanes(d))) {
    const SimdSweep<decltype(d)> sweep{d, p, j};
    const auto tape = [&] {
      if constexpr (kOutput) return tape_forward_given<1>(e, sweep, hn::LoadU(d, reinterpret_cast<const L*>(p[2 * N + 1]) + j));
      else return tape_forward<1>(e, sweep);
    }();
    GradientSums<N, hn::Vec<decltype(d)>> sums;
    for (auto& a : sums.adj) a = hn::Zero(d);  // (for leaves no gradient reaches; the compiler drops the rest)
    tape_backward<1>(e, sweep, tape, hn::LoadU(d, reinterpret_cast<const L*>(p[0]) + j), sums);
    sums.store(p + N + 1, later,
               [&](auto, char* buffer, const auto& v) { hn::StoreU(v, d, reinterpret_cast<L*>(buffer) + j); });
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();

#ifdef KILN_WITH_CUDA
namespace kiln::detail {
// (cuda/autograd.hpp, which <kiln/kiln.hpp> includes in such builds) Writes buffers[k] as run_kernel does, with one
// generated kernel on g's device.
template <class E>
void cuda_fused_backward(const E& e, const TensorImpl& g, const Shape& shape, const autograd::GradList& buffers,
                         const uint64_t* later);
}  // namespace kiln::detail
#endif

namespace kiln::autograd {

namespace detail {

template <class E, bool kOutput>
void scalar_backward_kernel(const void* context, char* const* ptr, int64_t n) {
  const auto& ctx = *static_cast<const BackwardContext<E>*>(context);
  const E& e = *ctx.expr;
  using G = compute_t<typename E::value_type>;
  constexpr int N = leaf_count_v<E>;
  for (int64_t j = 0; j < n; ++j) {
    const kiln::HWY_NAMESPACE::ScalarSweep sweep{ptr, j};
    const auto tape = [&] {
      if constexpr (kOutput) return kiln::HWY_NAMESPACE::tape_forward_given<1>(e, sweep, reinterpret_cast<const G*>(ptr[2 * N + 1])[j]);
      else return kiln::HWY_NAMESPACE::tape_forward<1>(e, sweep);
    }();
    // (Adjoints in double: every floating dtype's compute type converts to it and back exactly.)
    kiln::HWY_NAMESPACE::GradientSums<N, double> sums{};
    kiln::HWY_NAMESPACE::tape_backward<1>(e, sweep, tape, reinterpret_cast<const G*>(ptr[0])[j], sums);
    sums.store(ptr + N + 1, ctx.later, [&](auto k, char* buffer, double v) {
      if constexpr (cpu::kernel_dtype<E>(leaf_dtypes<E>::value[k]) == ScalarType::Double)
        reinterpret_cast<double*>(buffer)[j] = v;
      else
        reinterpret_cast<float*>(buffer)[j] = float(v);
    });
  }
}

// Operand types of E's backward kernel: the incoming gradient, the leaves, their gradients (and the output).
template <class E, bool kOutput>
constexpr auto backward_operands() {
  constexpr int N = leaf_count_v<E>;
  const auto leaves = cpu::kernel_operands<E>(std::array<ScalarType, 0>{});
  std::array<cpu::OperandType, 2 * N + 1 + kOutput> types{};
  constexpr ScalarType g = scalar_type_of<typename E::value_type>();
  types[0] = {g, cpu::kernel_dtype<E>(g), false};
  for (int k = 0; k < N; ++k) {
    types[1 + k] = leaves[k];
    types[1 + N + k] = {leaves[k].stored, leaves[k].kernel, true};
  }
  if constexpr (kOutput) types[2 * N + 1] = types[0];
  return types;
}

}  // namespace detail

// The backward of one fused expression E; kOutput: it reads the root's value from the saved output.
template <class E, bool kOutput>
struct FusedBackward final : FusedNode {
  static constexpr int N = leaf_count_v<E>;

  FusedBackward(const E& e, const ImplPtr* const* leaves, Shape shape, Shape expanded, std::string kind,
                double scale, const ImplPtr& output)
      : FusedNode(leaves, N, gradient_reaches<E>.data(), std::move(shape), std::move(expanded), std::move(kind),
                  scale),
        expr_(e) {
    if constexpr (kOutput) output_ = SavedTensor(output);
  }

  void release_saved() override {
    FusedNode::release_saved();
    release_leaves(expr_);
  }

 private:
  void describe(std::ostream& out) const override {
    int leaf = 0;
    detail::describe(out, expr_, leaf);
  }

  void run_kernel(const TensorImpl& g, const GradList& buffers, const uint64_t* later) const override {
#ifdef KILN_WITH_CUDA
    if (g.device().is_cuda()) return kiln::detail::cuda_fused_backward(expr_, g, shape_, buffers, later);
#endif
    static constexpr auto types = detail::backward_operands<E, kOutput>();
    cpu::KernelDesc kernel;
    if constexpr (cpu::is_simd_v<E>)
      kernel = {&kiln::HWY_NAMESPACE::simd_backward_kernel<E, kOutput>, kiln::HWY_NAMESPACE::simd_lanes<E>()};
    else
      kernel = {&detail::scalar_backward_kernel<E, kOutput>, 1};
    const BackwardContext<E> context{&expr_, later};
    cpu::run_plan(backward_plan<N, kOutput>(g, buffers), types.data(), kernel, &context,
                  3 * tree_traits<E>::cost + 2 * N + 1);
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
// kMaterialized: out holds e's values, so a root whose derivative reads its value may read it there
// (detail::root_from_output; as PyTorch's exp, sigmoid and tanh save their result, modifying out in place then
// makes backward throw).
template <class E, bool kMaterialized>
void record_fused(const E& e, const ImplPtr& out, const Shape& expr_shape, const Shape& expanded_grad_shape,
                  const char* kind, double scale) {
  constexpr bool kOutput = kMaterialized && detail::root_from_output<E>::value;
  std::array<const ImplPtr*, leaf_count_v<E>> leaves;
  size_t k = 0;
  for_each_leaf(e, [&](const auto& leaf) { leaves[k++] = &leaf.impl; });
  AutogradMeta& meta = meta_of(out);
  meta.grad_fn = std::make_shared<FusedBackward<E, kOutput>>(e, leaves.data(), expr_shape, expanded_grad_shape, kind,
                                                             scale, out);
  meta.output_nr = 0;
}

#if KILN_HEADER_DEFINITIONS
KILN_DECL FusedNode::FusedNode(const ImplPtr* const* leaves, size_t n, const bool* reaches, Shape shape,
                               Shape expanded, std::string kind, double scale)
    : shape_(std::move(shape)),
      grad_shape_(std::move(expanded)),
      kind_(std::move(kind)),
      scale_(scale) {
  next_edges.reserve(n);
  leaves_.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    const ImplPtr& leaf = *leaves[k];
    // A tensor that appears as several leaves (a * a) is saved once and its edge looked up once: `same` is its
    // first leaf, `same_grad` its first leaf that gets a gradient (k when there is none before k).
    size_t same = k, same_grad = k;
    for (size_t j = 0; j < k && same_grad == k; ++j)
      if (*leaves[j] == leaf) {
        if (same == k) same = j;
        if (reaches[j]) same_grad = j;
      }
    if (!reaches[k]) next_edges.emplace_back();
    else next_edges.push_back(same_grad < k ? next_edges[same_grad] : gradient_edge(leaf));
    // It also gets one buffer, where its first leaf with a gradient stores the sum of all of their adjoints (at most
    // 64 leaves: run_plan's operand bound).
    const bool owns_buffer = next_edges[k].valid() && same_grad == k;
    if (next_edges[k].valid() && same_grad < k) leaves_[same_grad].later |= uint64_t(1) << k;
    leaves_.push_back({same < k ? leaves_[same].tensor : SavedTensor::input(leaf), owns_buffer, 0});
  }
}

KILN_DECL std::string FusedNode::name() const {
  std::ostringstream out;
  out << kind_ << '(';
  describe(out);
  out << ')';
  return out.str();
}

KILN_DECL void FusedNode::release_saved() {
  leaves_.clear();
  output_ = {};
}

KILN_DECL GradList FusedNode::apply(GradList&& grads) {
  const size_t n = next_edges.size();
  ImplPtr g = grads.at(0);
  if (!g || leaves_.empty()) return GradList(n);
  for (const SavedLeaf& leaf : leaves_) leaf.tensor.unpack(*this);
  if (g->shape != grad_shape_ && !(g->is_contiguous() && g->numel() == numel_of(grad_shape_)))
    throw ShapeError(kiln::detail::cat("backward: ", name(), " got a gradient of shape ", g->shape, ", expected ",
                                       grad_shape_));
  if (g->shape != grad_shape_) g = g->view_as(grad_shape_, contiguous_strides(grad_shape_), g->offset);
  if (scale_ != 1) g = scaled_gradient(*g, scale_);
  // One gradient buffer of the expression's shape per tensor that needs one, written by the kernel once:
  // leaf k's adjoint plus those of the later leaves that are the same tensor (leaves_[k].later).
  GradList buffers(n);
  uint64_t later[kMaxOperands];
  for (size_t k = 0; k < n; ++k) {
    later[k] = leaves_[k].later;
    if (leaves_[k].owns_buffer)
      buffers[k] = TensorImpl::allocate(shape_, leaves_[k].tensor.impl->dtype, "backward", g->device());
  }
  if (numel_of(shape_) > 0) run_kernel(*g, buffers, later);
  // A broadcast leaf's gradient is summed to its shape.
  for (size_t k = 0; k < n; ++k)
    if (buffers[k]) buffers[k] = sum_to_shape(buffers[k], leaves_[k].tensor.impl->shape);
  return buffers;
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln::autograd

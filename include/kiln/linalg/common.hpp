#pragma once
// What every kiln::linalg function shares: the dtype rule (float or double), shape checks with
// torch.linalg's wording, LinAlgError, a batch of matrices as Eigen maps, the loop over a batch (in
// parallel, failures reported by the lowest batch index), broadcasting of two operands' batch dims, and
// the recording of a backward node; CUDA operands go through the host (on_cuda).
#include <atomic>
#include <memory>
#include <type_traits>

#include "kiln/autograd/engine.hpp"
#include "kiln/cpu/parallel.hpp"
#include "kiln/linalg/eigen_modules.hpp"
#include "kiln/tensor/gather.hpp"
#include "kiln/tensor/tensor.hpp"
#include "kiln/tensor/views.hpp"

namespace kiln::linalg {

// A matrix the factorization cannot handle (singular, not positive-definite, no convergence), as
// torch.linalg.LinAlgError. Shape and dtype problems are ShapeError / compile-time errors instead.
struct LinAlgError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {

using kiln::detail::cat;
using autograd::ImplPtr;

template <class T>
constexpr void require_float() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "kiln: linalg functions take float or double tensors; convert with .to<double>()");
}

template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatrixMap = Eigen::Map<Matrix<T>>;

// An operand as a Tensor (an expression is materialized, recording its own node).
template <Operand X>
Tensor<typename X::value_type> as_tensor(const X& x) {
  if constexpr (TensorHandle<X>) return x;
  else return Tensor<typename X::value_type>(x);
}

// s without its last `trailing` dims.
inline Shape batch_shape(const Shape& s, int trailing = 2) {
  Shape out;
  for (int i = 0; i + trailing < s.size(); ++i) out.push_back(s[i]);
  return out;
}

inline void require_matrix(const char* op, const char* name, const Shape& s) {
  check<ShapeError>(s.size() >= 2, op, ": ", name, " must have at least 2 dimensions, got shape ", s);
}
inline void require_square(const char* op, const char* name, const Shape& s) {
  require_matrix(op, name, s);
  check<ShapeError>(s[s.size() - 1] == s[s.size() - 2], op, ": ", name,
                    " must be batches of square matrices, but they are ", s[s.size() - 2], " by ", s[s.size() - 1],
                    " matrices (shape ", s, ")");
}

// torch's rule for a right-hand side that is a vector (or a batch of them) rather than a matrix: B is 1-d, or
// B's shape is A's without its last dim.
inline bool is_vector_rhs(const Shape& a, const Shape& b) {
  return b.size() == 1 || (b.size() + 1 == a.size() && b == batch_shape(a, 1));
}

// "(Batch element 3): " for an input with batch dims, nothing for a single matrix.
inline std::string batch_prefix(const Shape& s, int64_t index) {
  return s.size() > 2 ? cat("(Batch element ", index, "): ") : std::string();
}

// A contiguous stack of matrices [*, rows, cols] with an Eigen map of each. Built from a tensor it holds a
// contiguous copy (or the tensor itself), cut from the graph; built from a shape it holds a new tensor.
template <class T>
struct Stack {
  Tensor<T> tensor;
  int64_t count = 0, rows = 0, cols = 0;

  explicit Stack(const Tensor<T>& t) : tensor(contiguous_detached(t)) { set_sizes(); }
  Stack(const Shape& shape, const char* op)
      : tensor(TensorImpl::allocate(shape, scalar_type_of<T>(), op)) { set_sizes(); }

  MatrixMap<T> operator[](int64_t i) const { return MatrixMap<T>(tensor.data_ptr() + i * rows * cols, rows, cols); }

 private:
  static Tensor<T> contiguous_detached(const Tensor<T>& t) {
    NoGradGuard no_grad;
    return t.detach().contiguous();
  }
  void set_sizes() {
    const Shape& s = tensor.shape();
    rows = s[s.size() - 2];
    cols = s[s.size() - 1];
    count = rows * cols == 0 ? numel_of(batch_shape(s)) : tensor.numel() / (rows * cols);
  }
};

// A batch's per-matrix failure: the lowest batch index whose f returned nonzero, and that code.
struct Failure {
  int64_t index = -1;
  int64_t code = 0;
  explicit operator bool() const { return index >= 0; }
};

// Calls f(i) for every matrix i in [0, count), in parallel over the batch when the work (count * cost)
// pays for threads. f returns 0 on success or a nonzero code; it must not throw.
template <class F>
Failure for_each_matrix(int64_t count, int64_t cost, F&& f) {
  std::atomic<int64_t> first{count};
  std::vector<int64_t> codes(size_t(count > 0 ? count : 0), 0);
  cpu::parallel_for(count, cost, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      codes[size_t(i)] = f(i);
      if (codes[size_t(i)] != 0) {
        int64_t seen = first.load();
        while (i < seen && !first.compare_exchange_weak(seen, i)) {
        }
      }
    }
  });
  const int64_t i = first.load();
  return i < count ? Failure{i, codes[size_t(i)]} : Failure{};
}

// Cost of an n x n factorization, in the units of cpu::parallel_for's threshold.
inline int64_t cubic_cost(int64_t n) { return std::max<int64_t>(n * n * n, 1); }

// a and b with their batch dims (all but the last `trailing_a` / `trailing_b`) broadcast to a common batch
// shape: expanded views, so gradients are summed back by the views' own backward.
template <class T>
std::pair<Tensor<T>, Tensor<T>> broadcast_batch(const Tensor<T>& a, const Tensor<T>& b, const char* op) {
  const Shape ba = batch_shape(a.shape()), bb = batch_shape(b.shape());
  Shape batch;
  try {
    batch = broadcast_shapes(ba, bb, op);
  } catch (const ShapeError&) {
    throw ShapeError(cat(op, ": the batch dims of shapes ", a.shape(), " and ", b.shape(), " cannot be broadcast"));
  }
  auto expanded = [&](const Tensor<T>& t) {
    Shape s = batch;
    s.push_back(t.size(-2));
    s.push_back(t.size(-1));
    return s == t.shape() ? t : t.expand(s);
  };
  return {expanded(a), expanded(b)};
}

// kiln::linalg computes with Eigen on the host. A function given CUDA tensors calls itself on host copies and
// moves its results back (`return f(a.cpu()).to(a.device())`): Tensor::to's copies are differentiable, so gradients
// reach the device tensors. Each call synchronizes with the device, as torch's linalg functions that check the
// factorization's info do. True when the operands are on a CUDA device; operands on two devices are refused.
template <class T, class... Ts>
bool on_cuda([[maybe_unused]] const char* op, const Tensor<T>& a, const Tensor<Ts>&... b) {
  (kiln::detail::check_same_device(op, "A", a.impl(), "B", b.impl()), ...);
  return a.is_cuda();
}

// True when a node should be recorded for an op on these inputs.
template <class T, class... Ts>
bool needs_grad(const Tensor<T>& t, const Ts&... rest) {
  if (!GradMode::is_enabled()) return false;
  return (autograd::requires_grad(t.impl()) || ... || autograd::requires_grad(rest.impl()));
}

// Makes node the grad_fn of out.
template <class T>
void record(const Tensor<T>& out, std::shared_ptr<autograd::Node> node) {
  autograd::meta_of(out.impl_ptr()).grad_fn = std::move(node);
}

// The decompositions without a backward in kiln (qr, svd, lstsq, the SVD-based norms) refuse an input that
// requires grad rather than return results whose gradient would silently be zero.
template <class T>
void refuse_grad(const char* op, const Tensor<T>& t) {
  check<std::logic_error>(!needs_grad(t), op,
                          ": kiln has no gradient for this function; call it on x.detach() or under "
                          "kiln::NoGradGuard (gradients exist for solve, inv, det, slogdet, cholesky and eigh)");
}

}  // namespace detail
}  // namespace kiln::linalg

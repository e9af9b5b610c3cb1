#pragma once
// Losses as torch.nn.functional's: cross_entropy (class indices or probabilities, label_smoothing,
// ignore_index, weight), nll_loss, mse_loss, l1_loss, smooth_l1_loss, huber_loss, kl_div,
// binary_cross_entropy, binary_cross_entropy_with_logits.
// Built from kiln's differentiable ops (log_softmax, gather, fused expressions, sum/mean), so each is
// stable (log-sum-exp) and has its backward; reduction None, Mean (default) or Sum, and for kl_div BatchMean.
#include <cmath>
#include <optional>

#include "kiln/autograd/function.hpp"
#include "kiln/tensor/gather.hpp"
#include "kiln/tensor/reduce.hpp"
#include "kiln/tensor/softmax.hpp"

namespace kiln::nn {

// BatchMean is PyTorch's reduction='batchmean', which only kl_div accepts: the sum divided by input.size(0).
enum class Reduction { None, Mean, Sum, BatchMean };

namespace functional {

// An optional tensor argument (weight, pos_weight) that does not take part in deducing T.
template <class T>
using OptionalTensor = std::optional<std::type_identity_t<Tensor<T>>>;

namespace detail {
// Every loss but kl_div refuses BatchMean, as PyTorch refuses 'batchmean'.
inline void check_reduction(const char* op, Reduction r) {
  check<std::invalid_argument>(r != Reduction::BatchMean, op,
                               ": reduction BatchMean (PyTorch's 'batchmean') is kl_div's only");
}
template <Dtype T>
Tensor<T> reduce(const Tensor<T>& loss, Reduction r, const char* op) {
  switch (r) {
    case Reduction::None: return loss;
    case Reduction::Sum: return sum(loss);
    case Reduction::Mean: return mean(loss);
    case Reduction::BatchMean: break;  // kl_div divides its Sum itself
  }
  check_reduction(op, r);
  throw std::invalid_argument(kiln::detail::cat(op, ": unknown reduction ", int(r)));
}
// total / count for the 'mean' reductions of the class-index losses: NaN where count is 0 (every
// target ignored), as PyTorch, with a zero gradient for the input there (PyTorch's nll_loss backward skips
// ignored targets) rather than 0 * inf = NaN.
template <Dtype T>
Tensor<T> divide_by_count(const Tensor<T>& total, const Tensor<T>& count) {
  const Tensor<bool> counted = count != T(0);
  return Tensor<T>(where(counted, total / Tensor<T>(where(counted, count, T(1))), T(NAN)));
}
// input and target of one shape (elementwise losses).
inline void check_same_shape(const char* op, const Shape& input, const Shape& target) {
  check<ShapeError>(input == target, op, ": input of shape ", input, " and target of shape ", target, " differ");
}
// Every element of `what` (input or target of op) in [0, 1]; NaN is refused too, as PyTorch.
template <Dtype T>
void check_probabilities(const char* op, const char* what, const Tensor<T>& t) {
  const Tensor<T> c = t.detach().contiguous();
  const T* p = c.data_ptr();
  for (int64_t i = 0; i < c.numel(); ++i) {
    const double v = double(p[i]);
    if (!(v >= 0 && v <= 1))
      throw std::invalid_argument(kiln::detail::cat(op, ": all elements of ", what, " should be in [0, 1], got ", v,
                                                    " at flat index ", i, " of shape ", t.shape()));
  }
}
// The class dim is 1 (or 0 for a 1-d input of one sample's scores).
template <Dtype T>
void check_class_target(const char* op, const Tensor<T>& input, const Shape& target) {
  check<ShapeError>(input.dim() >= 1, op, ": input must have a class dim, got shape ", input.shape());
  Shape expected = input.shape();
  expected.erase(input.dim() == 1 ? 0 : 1);
  check<ShapeError>(target == expected, op, ": target of shape ", target, " does not match input of shape ",
                    input.shape(), " (expected ", expected, ")");
}
// PyTorch's binary_cross_entropy per element, unweighted: -(y max(log x, -100) + (1 - y) max(log(1 - x), -100)),
// with PyTorch's backward rather than the clamp's: d/dx = (x - y) / max((1 - x) x, eps), finite where x is 0 or 1
// (through the clamp it would be 1 / (1 - x) or -1 / x there), and d/dy = log(1 - x) - log x, unclamped.
template <Dtype T>
struct BinaryCrossEntropy : autograd::Function<BinaryCrossEntropy<T>> {
  static constexpr double kEps = double(1e-12f);  // PyTorch's EPSILON is a float, also for double inputs
  static Tensor<T> forward(autograd::AutogradContext* ctx, const Tensor<T>& x, const Tensor<T>& y) {
    ctx->save_for_backward<T>({x, y});
    ctx->saved_data["target_grad"] = y.requires_grad();
    return Tensor<T>((y - 1) * maximum(log1p(-x), T(-100)) - y * maximum(log(x), T(-100)));
  }
  static std::vector<Tensor<T>> backward(autograd::AutogradContext* ctx, std::vector<Tensor<T>> grad) {
    const std::vector<Tensor<T>> saved = ctx->get_saved_variables<T>();
    const Tensor<T>& x = saved[0], &y = saved[1];
    const Tensor<T> dx = grad[0] * (x - y) / maximum((1 - x) * x, T(kEps));
    if (!std::any_cast<bool>(ctx->saved_data["target_grad"])) return {dx, {}};
    return {dx, Tensor<T>(grad[0] * (log1p(-x) - log(x)))};
  }
};
// loss * weight in one pass, weight broadcast to the input's shape (never growing it, as PyTorch).
template <Dtype T, class E>
Tensor<T> weighted(const char* op, const E& loss, const OptionalTensor<T>& weight, const Shape& input) {
  if (!weight) return Tensor<T>(loss);
  check<ShapeError>(broadcast_shapes(weight->shape(), input, op) == input, op, ": weight of shape ",
                    weight->shape(), " does not broadcast to the input's shape ", input);
  return Tensor<T>(loss * *weight);
}
}  // namespace detail

// Mean squared error.
template <Dtype T>
Tensor<T> mse_loss(const Tensor<T>& input, const Tensor<T>& target, Reduction reduction = Reduction::Mean) {
  detail::check_same_shape("mse_loss", input.shape(), target.shape());
  return detail::reduce(Tensor<T>(square(input - target)), reduction, "mse_loss");
}

template <Dtype T>
Tensor<T> l1_loss(const Tensor<T>& input, const Tensor<T>& target, Reduction reduction = Reduction::Mean) {
  detail::check_same_shape("l1_loss", input.shape(), target.shape());
  return detail::reduce(Tensor<T>(abs(input - target)), reduction, "l1_loss");
}

// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta.
template <Dtype T>
Tensor<T> smooth_l1_loss(const Tensor<T>& input, const Tensor<T>& target, Reduction reduction = Reduction::Mean,
                         double beta = 1.0) {
  detail::check_same_shape("smooth_l1_loss", input.shape(), target.shape());
  check<std::invalid_argument>(beta >= 0, "smooth_l1_loss: beta must be >= 0, got ", beta);
  detail::check_reduction("smooth_l1_loss", reduction);  // before l1_loss would name itself
  if (beta == 0) return l1_loss(input, target, reduction);
  const auto d = abs(input - target);
  return detail::reduce(Tensor<T>(where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)), reduction, "smooth_l1_loss");
}

// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta): smooth_l1_loss with beta = delta, times delta.
template <Dtype T>
Tensor<T> huber_loss(const Tensor<T>& input, const Tensor<T>& target, Reduction reduction = Reduction::Mean,
                     double delta = 1.0) {
  detail::check_same_shape("huber_loss", input.shape(), target.shape());
  check<std::invalid_argument>(delta > 0, "huber_loss: delta must be > 0, got ", delta);
  const auto d = abs(input - target);
  return detail::reduce(Tensor<T>(where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)), reduction, "huber_loss");
}

// Kullback-Leibler divergence of input log-probabilities from target probabilities, pointwise:
// target (log target - input), 0 where target is 0 (PyTorch's xlogy); log_target: exp(target) (target - input).
// Reduction::BatchMean (PyTorch's 'batchmean', the KL divergence per sample) divides the sum by input.size(0), and
// leaves a 0-d input's sum as it is, as PyTorch.
template <Dtype T>
Tensor<T> kl_div(const Tensor<T>& input, const Tensor<T>& target, Reduction reduction = Reduction::Mean,
                 bool log_target = false) {
  detail::check_same_shape("kl_div", input.shape(), target.shape());
  const bool batch_mean = reduction == Reduction::BatchMean;
  const Reduction r = batch_mean ? Reduction::Sum : reduction;
  Tensor<T> out;
  if (log_target) {
    out = detail::reduce(Tensor<T>(exp(target) * (target - input)), r, "kl_div");
  } else {
    const Tensor<bool> zero = target == T(0);
    const auto xlogx = where(zero, T(0), target * log(where(zero, T(1), target)));
    out = detail::reduce(Tensor<T>(xlogx - target * input), r, "kl_div");
  }
  if (!batch_mean || input.dim() == 0) return out;
  return Tensor<T>(out / double(input.size(0)));
}

// Binary cross entropy of probabilities (input and target in [0, 1], else refused, as PyTorch): each log term is
// clamped at -100, so x = 0 or 1 gives at most 100; weight (broadcast to the input) rescales each element.
template <Dtype T>
Tensor<T> binary_cross_entropy(const Tensor<T>& input, const Tensor<T>& target,
                               OptionalTensor<T> weight = std::nullopt, Reduction reduction = Reduction::Mean) {
  constexpr const char* op = "binary_cross_entropy";
  detail::check_same_shape(op, input.shape(), target.shape());
  detail::check_probabilities(op, "input", input);
  detail::check_probabilities(op, "target", target);
  const Tensor<T> loss = detail::BinaryCrossEntropy<T>::apply(input, target);
  return detail::reduce(detail::weighted<T>(op, loss, weight, input.shape()), reduction, op);
}

// Stable: max(x, 0) - x y + log(1 + exp(-|x|)); pos_weight p: (1 - y) x + (1 + (p - 1) y) (log1p(exp(-|x|)) + max(-x, 0)).
// weight (broadcast to the input) rescales each element, as PyTorch's weight=; it comes last, after pos_weight,
// unlike PyTorch's order, so that callers written before it keep compiling.
template <Dtype T>
Tensor<T> binary_cross_entropy_with_logits(const Tensor<T>& input, const Tensor<T>& target,
                                           Reduction reduction = Reduction::Mean,
                                           OptionalTensor<T> pos_weight = std::nullopt,
                                           OptionalTensor<T> weight = std::nullopt) {
  constexpr const char* op = "binary_cross_entropy_with_logits";
  detail::check_same_shape(op, input.shape(), target.shape());
  const auto softplus_neg = log1p(exp(-abs(input))) + maximum(-input, T(0));
  if (pos_weight) {
    const auto loss = (1 - target) * input + (1 + (*pos_weight - 1) * target) * softplus_neg;
    return detail::reduce(detail::weighted<T>(op, loss, weight, input.shape()), reduction, op);
  }
  return detail::reduce(detail::weighted<T>(op, (1 - target) * input + softplus_neg, weight, input.shape()), reduction,
                        op);
}

// Negative log likelihood of class indices: input [N, C, d...] (or [C]) of log-probabilities, target
// [N, d...] (or []) of int64 classes; weight [C] rescales classes; targets equal to ignore_index count
// for nothing (and not in the mean, which divides by the total weight of the counted targets).
template <Dtype T>
Tensor<T> nll_loss(const Tensor<T>& input, const Tensor<int64_t>& target, OptionalTensor<T> weight = std::nullopt,
                   int64_t ignore_index = -100, Reduction reduction = Reduction::Mean) {
  detail::check_class_target("nll_loss", input, target.shape());
  const int class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(class_dim);
  const Tensor<bool> counted = target != ignore_index;
  // Ignored targets read class 0 (in range) and are masked out.
  const Tensor<int64_t> safe = where(counted, target, int64_t(0));
  // CPU code never reads device memory: CUDA targets are range-checked by the gather's kernel, whose error names
  // nll_loss, the target and the class count (nll_loss: index 7 is out of range for dim 1 of size 5).
  if (!safe.is_cuda()) {
    const int64_t* t = safe.contiguous().data_ptr();
    for (int64_t i = 0; i < safe.numel(); ++i)
      if (t[i] < 0 || t[i] >= classes)
        throw std::out_of_range(kiln::detail::cat("nll_loss: target ", t[i], " is out of range for ", classes, " classes"));
  }
  const Tensor<T> picked =
      kiln::detail::gather_as(input, class_dim, safe.unsqueeze(class_dim), "nll_loss", "GatherBackward").squeeze(class_dim);
  Tensor<T> w = counted.to<T>();
  if (weight) {
    check<ShapeError>(weight->shape() == Shape{classes}, "nll_loss: weight of shape ", weight->shape(), " for ",
                      classes, " classes");
    w = Tensor<T>(w * kiln::detail::index_select_as(*weight, 0, safe.reshape({-1}), "nll_loss").reshape(safe.shape()));
  }
  const Tensor<T> loss = -picked * w;
  if (reduction == Reduction::Mean) return detail::divide_by_count(Tensor<T>(sum(loss)), Tensor<T>(sum(w)));
  return detail::reduce(loss, reduction, "nll_loss");
}

// Cross entropy of raw scores: log_softmax over the class dim, then nll_loss; label_smoothing mixes in
// the uniform distribution over classes, as PyTorch.
template <Dtype T>
Tensor<T> cross_entropy(const Tensor<T>& input, const Tensor<int64_t>& target,
                        OptionalTensor<T> weight = std::nullopt, int64_t ignore_index = -100,
                        Reduction reduction = Reduction::Mean, double label_smoothing = 0.0) {
  check<std::invalid_argument>(label_smoothing >= 0 && label_smoothing <= 1,
                               "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  detail::check_class_target("cross_entropy", input, target.shape());
  detail::check_reduction("cross_entropy", reduction);  // before nll_loss would name itself
  const int class_dim = input.dim() == 1 ? 0 : 1;
  const Tensor<T> logp = log_softmax(input, class_dim);
  const Tensor<T> nll = nll_loss(logp, target, weight, ignore_index, reduction);
  if (label_smoothing == 0) return nll;
  // The smoothing term: -sum_c w_c logp_c / C per counted sample, reduced like the nll term.
  const int64_t classes = input.size(class_dim);
  Tensor<T> per_class = logp;
  if (weight) {
    Shape line;
    for (int d = 0; d < input.dim(); ++d) line.push_back(d == class_dim ? classes : 1);
    per_class = Tensor<T>(logp * weight->reshape(line));
  }
  const Tensor<T> counted = (target != ignore_index).to<T>();
  const Tensor<T> smooth = Tensor<T>(-sum(per_class, class_dim) * counted);
  Tensor<T> smooth_reduced;
  if (reduction == Reduction::Mean) {
    Tensor<T> denom = sum(counted);
    if (weight) {
      const Tensor<int64_t> safe = where(target != ignore_index, target, int64_t(0));
      denom = sum(counted * index_select(*weight, 0, safe.reshape({-1})).reshape(safe.shape()));
    }
    smooth_reduced = detail::divide_by_count(Tensor<T>(sum(smooth)), denom);
  } else {
    smooth_reduced = detail::reduce(smooth, reduction, "cross_entropy");
  }
  return Tensor<T>(nll * (1 - label_smoothing) + smooth_reduced * (label_smoothing / double(classes)));
}

// Cross entropy against class probabilities (target of the input's shape): -sum_c w_c y_c logp_c per
// sample, with y smoothed to y (1 - eps) + eps / C; the mean is over samples.
template <Dtype T>
Tensor<T> cross_entropy(const Tensor<T>& input, const Tensor<T>& target, OptionalTensor<T> weight = std::nullopt,
                        Reduction reduction = Reduction::Mean, double label_smoothing = 0.0) {
  detail::check_same_shape("cross_entropy", input.shape(), target.shape());
  const int class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(class_dim);
  const Tensor<T> logp = log_softmax(input, class_dim);
  Tensor<T> y = label_smoothing > 0 ? Tensor<T>(target * (1 - label_smoothing) + label_smoothing / double(classes)) : target;
  if (weight) {
    Shape line;
    for (int d = 0; d < input.dim(); ++d) line.push_back(d == class_dim ? classes : 1);
    y = Tensor<T>(y * weight->reshape(line));
  }
  return detail::reduce(Tensor<T>(-sum(logp * y, class_dim)), reduction, "cross_entropy");
}

// The float losses are instantiated once in the compiled part of a separately compiled program (core/config.hpp).
KILN_INSTANTIATE(Tensor<float> mse_loss<float>(const Tensor<float>&, const Tensor<float>&, Reduction));
KILN_INSTANTIATE(Tensor<float> l1_loss<float>(const Tensor<float>&, const Tensor<float>&, Reduction));
KILN_INSTANTIATE(Tensor<float> smooth_l1_loss<float>(const Tensor<float>&, const Tensor<float>&, Reduction, double));
KILN_INSTANTIATE(Tensor<float> huber_loss<float>(const Tensor<float>&, const Tensor<float>&, Reduction, double));
KILN_INSTANTIATE(Tensor<float> kl_div<float>(const Tensor<float>&, const Tensor<float>&, Reduction, bool));
KILN_INSTANTIATE(Tensor<float> binary_cross_entropy<float>(const Tensor<float>&, const Tensor<float>&,
                                                           OptionalTensor<float>, Reduction));
KILN_INSTANTIATE(Tensor<float> binary_cross_entropy_with_logits<float>(const Tensor<float>&, const Tensor<float>&,
                                                                        Reduction, OptionalTensor<float>,
                                                                        OptionalTensor<float>));
KILN_INSTANTIATE(Tensor<float> nll_loss<float>(const Tensor<float>&, const Tensor<int64_t>&, OptionalTensor<float>,
                                               int64_t, Reduction));
KILN_INSTANTIATE(Tensor<float> cross_entropy<float>(const Tensor<float>&, const Tensor<int64_t>&,
                                                    OptionalTensor<float>, int64_t, Reduction, double));
KILN_INSTANTIATE(Tensor<float> cross_entropy<float>(const Tensor<float>&, const Tensor<float>&, OptionalTensor<float>,
                                                    Reduction, double));

}  // namespace functional
}  // namespace kiln::nn

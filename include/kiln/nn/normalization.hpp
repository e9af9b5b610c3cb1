#pragma once
// Normalization: layer_norm, group_norm, batch_norm (functional, any floating dtype) and the LayerNorm,
// GroupNorm, BatchNorm1d / BatchNorm2d modules, as torch.nn's. Composed from kiln's differentiable
// reductions and fused expressions, so the backward comes with them; training-mode batch norm, the hot
// one in CNNs, is its own node (nn/batch_norm_kernel.hpp). On CUDA tensors (builds with KILN_WITH_CUDA) training-mode
// batch norm goes through cuDNN where it is usable (cuda/cudnn_batch_norm.hpp); otherwise, and for the other two, they
// are composed from reductions and expressions, which evaluate and differentiate on the device.
#include <optional>

#include "kiln/nn/batch_norm_kernel.hpp"
#include "kiln/nn/module.hpp"
#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/reduce.hpp"

#ifdef KILN_WITH_CUDA
namespace kiln::detail {
// Training-mode batch norm through cuDNN (cuda/cudnn_batch_norm.hpp, included at the end of this file in such builds).
template <Dtype T>
bool cudnn_batch_norm_applies(const Tensor<T>& x, const Tensor<T>& running_mean, const Tensor<T>& running_var,
                              double eps);
template <Dtype T>
Tensor<T> cudnn_batch_norm_training(const Tensor<T>& x, Tensor<T>& running_mean, Tensor<T>& running_var,
                                    const Tensor<T>& weight, const Tensor<T>& bias, double momentum, double eps);
}  // namespace kiln::detail
#endif

namespace kiln::nn {

namespace functional {

namespace detail {
// Shape [1, C, 1, ...] for a per-channel parameter of an input of rank `rank`.
inline Shape channel_shape(int64_t channels, int rank) {
  Shape s;
  for (int d = 0; d < rank; ++d) s.push_back(d == 1 ? channels : 1);
  return s;
}
template <Dtype T>
Tensor<T> affine(const Tensor<T>& y, const Tensor<T>& weight, const Tensor<T>& bias, const Shape& shape) {
  Tensor<T> out = y;
  if (weight.defined()) out = Tensor<T>(out * weight.reshape(shape));
  if (bias.defined()) out = Tensor<T>(out + bias.reshape(shape));
  return out;
}

// The biased variance of x over dims, mu its mean there (dims kept). A CUDA tensor takes the mean of the squared
// deviations: var has no device kernel yet, and mean and the expression differentiate on the device.
template <Dtype T>
Tensor<T> biased_var(const Tensor<T>& x, const Dims& dims, [[maybe_unused]] const Tensor<T>& mu) {
#ifdef KILN_WITH_CUDA
  if (x.is_cuda()) return mean(square(x - mu), dims, true);
#endif
  return var(x, dims, 0.0, true);
}

#ifdef KILN_WITH_CUDA
// batch_norm's defined tensors on x's device (a module left on the CPU for a CUDA input is the usual slip).
template <Dtype T>
void check_batch_norm_devices(const Tensor<T>& x, const Tensor<T>& running_mean, const Tensor<T>& running_var,
                              const Tensor<T>& weight, const Tensor<T>& bias) {
  const std::pair<const char*, const Tensor<T>*> tensors[] = {
      {"running_mean", &running_mean}, {"running_var", &running_var}, {"weight", &weight}, {"bias", &bias}};
  for (const auto& [name, t] : tensors)
    if (t->defined())
      check<std::invalid_argument>(t->device() == x.device(), "batch_norm: ", name, " is on ", t->device().str(),
                                   ", the input of shape ", x.shape(), " on ", x.device().str(),
                                   "; move them to one device first (Module::to)");
}

// Training-mode batch norm of a CUDA tensor x [N, C, ...] as reductions and expressions (batch_norm_training's node
// works in host memory), so autograd differentiates it on the device; the running statistics move as on the CPU.
template <Dtype T>
Tensor<T> batch_norm_training_on_device(const Tensor<T>& x, Tensor<T>& running_mean, Tensor<T>& running_var,
                                        const Tensor<T>& weight, const Tensor<T>& bias, double momentum, double eps,
                                        const ReplicaSum& replica_sum) {
  const int64_t c = x.size(1);
  for (const Tensor<T>* t : {&weight, &bias})
    check<ShapeError>(!t->defined() || t->numel() == c, "batch_norm: weight and bias need ", c, " values, got shape ",
                      t->shape());
  Dims dims{0};
  for (int d = 2; d < x.dim(); ++d) dims.push_back(d);
  double count = double(x.numel() / c);
  Tensor<T> mu, var_;
  if (!replica_sum) {
    mu = mean(x, dims, true);
    var_ = biased_var(x, dims, mu);
  } else if constexpr (std::is_same_v<T, float>) {
    // Over every replica's batch: the counts (no gradient), then the sums and the squared deviations, summed
    // differentiably, so that backward sums their gradients over the replicas too.
    check<std::invalid_argument>(bool(replica_sum.device), "batch_norm: this synchronized batch norm has no sum of "
                                 "CUDA tensors over the replicas (set by nn::convert_sync_batchnorm)");
    {
      NoGradGuard no_grad;
      count = double(replica_sum.device(full<float>({1}, float(count), x.device())).cpu().item());
    }
    check<std::invalid_argument>(count > 1, "batch_norm: expected more than 1 value per channel in training, got ",
                                 count, " over all replicas (input ", x.shape(), " here)");
    mu = replica_sum.device(sum(x, dims, true)) / float(count);
    var_ = replica_sum.device(sum(square(x - mu), dims, true)) / float(count);
  } else {
    throw std::invalid_argument(kiln::detail::cat("batch_norm: synchronized batch norm of a ", dtype_name(scalar_type_of<T>()),
                                                  " CUDA tensor (float only)"));
  }
  const Tensor<T> y((x - mu) / sqrt(var_ + eps));
  if (running_mean.defined() && running_var.defined()) {
    NoGradGuard no_grad;
    running_mean.copy_(running_mean * (1 - momentum) + mu.reshape({c}) * momentum);
    running_var.copy_(running_var * (1 - momentum) + var_.reshape({c}) * (momentum * count / (count - 1)));
  }
  return affine(y, weight, bias, channel_shape(c, x.dim()));
}
#endif
}  // namespace detail

// Normalizes over the last dims of normalized_shape: (x - mean) / sqrt(var + eps) * weight + bias.
template <Dtype T>
Tensor<T> layer_norm(const Tensor<T>& x, const Shape& normalized_shape, const Tensor<T>& weight = {},
                     const Tensor<T>& bias = {}, double eps = 1e-5) {
  const int k = normalized_shape.size(), rank = x.dim();
  check<ShapeError>(k >= 1 && k <= rank, "layer_norm: normalized_shape ", normalized_shape, " for input of shape ",
                    x.shape());
  Dims dims;
  for (int d = rank - k; d < rank; ++d) {
    check<ShapeError>(x.size(d) == normalized_shape[d - (rank - k)], "layer_norm: input of shape ", x.shape(),
                      " does not end in normalized_shape ", normalized_shape);
    dims.push_back(d);
  }
  const Tensor<T> mu = mean(x, dims, true);
  const Tensor<T> var_ = detail::biased_var(x, dims, mu);
  const Tensor<T> y(Tensor<T>((x - mu) / sqrt(var_ + eps)));
  return detail::affine(y, weight, bias, normalized_shape);
}

// Normalizes groups of channels of x [N, C, ...] (C divisible by num_groups), then a per-channel affine.
template <Dtype T>
Tensor<T> group_norm(const Tensor<T>& x, int64_t num_groups, const Tensor<T>& weight = {}, const Tensor<T>& bias = {},
                     double eps = 1e-5) {
  check<ShapeError>(x.dim() >= 2 && num_groups > 0 && x.size(1) % num_groups == 0, "group_norm: ", x.size(1),
                    " channels of input ", x.shape(), " cannot form ", num_groups, " groups");
  const int64_t n = x.size(0);
  const Tensor<T> g = x.reshape({n, num_groups, -1});
  const Tensor<T> mu = mean(g, {2}, true);
  const Tensor<T> var_ = detail::biased_var(g, {2}, mu);
  const Tensor<T> y = Tensor<T>((g - mu) / sqrt(var_ + eps)).reshape(x.shape());
  return detail::affine(y, weight, bias, detail::channel_shape(x.size(1), x.dim()));
}

// Batch normalization of x [N, C, ...] over all dims but 1. Training: batch statistics (biased variance
// to normalize), and the running statistics, when given, move by momentum (unbiased variance, as
// PyTorch); otherwise the running statistics normalize. With `replica_sum` (nn::SyncBatchNorm), training uses the
// statistics of every replica's batch together.
template <Dtype T>
Tensor<T> batch_norm(const Tensor<T>& x, Tensor<T> running_mean, Tensor<T> running_var, const Tensor<T>& weight = {},
                     const Tensor<T>& bias = {}, bool training = false, double momentum = 0.1, double eps = 1e-5,
                     const detail::ReplicaSum& replica_sum = {}) {
  check<ShapeError>(x.dim() >= 2, "batch_norm: input must have a channel dim 1, got shape ", x.shape());
  const int64_t c = x.size(1);
  const Shape cs = detail::channel_shape(c, x.dim());
#ifdef KILN_WITH_CUDA
  detail::check_batch_norm_devices(x, running_mean, running_var, weight, bias);
#endif
  if (training) {
    check<std::invalid_argument>(replica_sum || x.numel() / c > 1,
                                 "batch_norm: expected more than 1 value per channel in training, got input ", x.shape());
#ifdef KILN_WITH_CUDA
    if (x.is_cuda() && !replica_sum && kiln::detail::cudnn_batch_norm_applies(x, running_mean, running_var, eps))
      return kiln::detail::cudnn_batch_norm_training(x, running_mean, running_var, weight, bias, momentum, eps);
    if (x.is_cuda())
      return detail::batch_norm_training_on_device(x, running_mean, running_var, weight, bias, momentum, eps, replica_sum);
#endif
    detail::BatchNormStats batch;
    Tensor<T> y = detail::batch_norm_training(x, weight, bias, eps, batch, replica_sum);
    const double count = batch.count;
    check<std::invalid_argument>(count > 1, "batch_norm: expected more than 1 value per channel in training, got ",
                                 count, " over all replicas (input ", x.shape(), " here)");
    if (running_mean.defined() && running_var.defined()) {
      NoGradGuard no_grad;
      const Tensor<T> mu = tensor(batch.mean).template to<T>(), var_ = tensor(batch.var).template to<T>();
      running_mean.copy_(running_mean * (1 - momentum) + mu * momentum);
      running_var.copy_(running_var * (1 - momentum) + var_ * (momentum * count / (count - 1)));
    }
    return y;
  }
  check<std::invalid_argument>(running_mean.defined() && running_var.defined(),
                               "batch_norm: evaluation needs running_mean and running_var");
  // One pass over x with a per-channel scale and shift computed first, as PyTorch's CPU kernel does: the
  // normalization then the affine took three passes and a square root per element.
  Tensor<T> scale = Tensor<T>(1 / sqrt(running_var + eps));
  if (weight.defined()) scale = Tensor<T>(scale * weight.reshape({c}));
  const Tensor<T> shift = bias.defined() ? Tensor<T>(bias.reshape({c}) - running_mean * scale) : Tensor<T>(-running_mean * scale);
  return Tensor<T>(x * scale.reshape(cs) + shift.reshape(cs));
}

}  // namespace functional

// A class template (instantiated as LayerNormImpl) so that its code, which compiles the normalization's kernels, is
// compiled only where a program uses the module, not in every translation unit that includes the header (0.3 s:
// docs/performance.md).
template <class = void>
class LayerNormImplT : public Module {
 public:
  explicit LayerNormImplT(Shape normalized_shape, double eps = 1e-5)
      : Module("LayerNorm"), shape_(std::move(normalized_shape)), eps_(eps) {
    weight = register_parameter("weight", ones<float>(shape_));
    bias = register_parameter("bias", zeros<float>(shape_));
  }
  Tensor<float> forward(const Tensor<float>& x) override;
  void pretty_print(std::ostream& out) const override { out << "LayerNorm(" << shape_ << ", eps=" << eps_ << ')'; }
  Tensor<float> weight, bias;

 private:
  Shape shape_;
  double eps_;
};
// Defined out of the class, so that a separately compiled program leaves it to its part (docs/design.md).
template <class V>
Tensor<float> LayerNormImplT<V>::forward(const Tensor<float>& x) {
  return functional::layer_norm(x, shape_, weight, bias, eps_);
}
using LayerNormImpl = LayerNormImplT<>;
KILN_MODULE(LayerNorm);

class GroupNormImpl : public Module {
 public:
  KILN_DECL GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps = 1e-5);
  KILN_DECL Tensor<float> forward(const Tensor<float>& x) override;
  KILN_DECL void pretty_print(std::ostream& out) const override;
  Tensor<float> weight, bias;

 private:
  int64_t groups_;
  double eps_;
};
KILN_MODULE(GroupNorm);

// BatchNorm1d ([N, C] or [N, C, L]) and BatchNorm2d ([N, C, H, W]): running statistics as buffers
// (running_mean, running_var, num_batches_tracked), batch statistics in train(), running ones in eval().
class BatchNormImpl : public Module {
 public:
  KILN_DECL BatchNormImpl(const char* name, int input_rank_lo, int input_rank_hi, int64_t num_features, double eps,
                          double momentum);
  KILN_DECL Tensor<float> forward(const Tensor<float>& x) override;
  KILN_DECL void pretty_print(std::ostream& out) const override;
  double eps() const { return eps_; }
  // Synchronized batch norm: training statistics over every replica's batch, summed by `sum` (set by
  // nn::convert_sync_batchnorm, <kiln/dist/sync_batch_norm.hpp>); empty for this process's batch alone.
  void set_replica_sum(functional::detail::ReplicaSum sum) { replica_sum_ = std::move(sum); }
  bool synchronized() const { return bool(replica_sum_); }
  Tensor<float> weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  int lo_, hi_;
  double eps_, momentum_;
  functional::detail::ReplicaSum replica_sum_;
};

class BatchNorm1dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm1dImpl(int64_t num_features, double eps = 1e-5, double momentum = 0.1)
      : BatchNormImpl("BatchNorm1d", 2, 3, num_features, eps, momentum) {}
};
KILN_MODULE(BatchNorm1d);
class BatchNorm2dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm2dImpl(int64_t num_features, double eps = 1e-5, double momentum = 0.1)
      : BatchNormImpl("BatchNorm2d", 4, 4, num_features, eps, momentum) {}
};
KILN_MODULE(BatchNorm2d);

#if KILN_HEADER_DEFINITIONS
KILN_DECL GroupNormImpl::GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps)
    : Module("GroupNorm"), groups_(num_groups), eps_(eps) {
  weight = register_parameter("weight", ones<float>({num_channels}));
  bias = register_parameter("bias", zeros<float>({num_channels}));
}
KILN_DECL Tensor<float> GroupNormImpl::forward(const Tensor<float>& x) {
  return functional::group_norm(x, groups_, weight, bias, eps_);
}
KILN_DECL void GroupNormImpl::pretty_print(std::ostream& out) const {
  out << "GroupNorm(" << groups_ << ", " << weight.size(0) << ", eps=" << eps_ << ')';
}

KILN_DECL BatchNormImpl::BatchNormImpl(const char* name, int input_rank_lo, int input_rank_hi, int64_t num_features,
                                       double eps, double momentum)
    : Module(name), lo_(input_rank_lo), hi_(input_rank_hi), eps_(eps), momentum_(momentum) {
  weight = register_parameter("weight", ones<float>({num_features}));
  bias = register_parameter("bias", zeros<float>({num_features}));
  running_mean = register_buffer("running_mean", zeros<float>({num_features}));
  running_var = register_buffer("running_var", ones<float>({num_features}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros<float>({}));
}
KILN_DECL Tensor<float> BatchNormImpl::forward(const Tensor<float>& x) {
  check<ShapeError>(x.dim() >= lo_ && x.dim() <= hi_, name(), ": input of shape ", x.shape(), " has ", x.dim(),
                    " dims, expected ", lo_, lo_ == hi_ ? "" : " or more");
  if (is_training()) {
    NoGradGuard no_grad;
    num_batches_tracked += 1.0f;
  }
  return functional::batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum_, eps_,
                                replica_sum_);
}
KILN_DECL void BatchNormImpl::pretty_print(std::ostream& out) const {
  out << name() << '(' << weight.size(0) << ", eps=" << eps_ << ", momentum=" << momentum_
      << (replica_sum_ ? ", synchronized" : "") << ')';
}
#endif  // KILN_HEADER_DEFINITIONS

// The float normalizations and LayerNorm are compiled once in a separately compiled program's part (core/config.hpp).
KILN_INSTANTIATE(Tensor<float> functional::layer_norm<float>(const Tensor<float>&, const Shape&, const Tensor<float>&,
                                                             const Tensor<float>&, double));
KILN_INSTANTIATE(Tensor<float> functional::group_norm<float>(const Tensor<float>&, int64_t, const Tensor<float>&,
                                                             const Tensor<float>&, double));
KILN_INSTANTIATE(Tensor<float> functional::batch_norm<float>(const Tensor<float>&, Tensor<float>, Tensor<float>,
                                                             const Tensor<float>&, const Tensor<float>&, bool, double,
                                                             double, const functional::detail::ReplicaSum&));
KILN_INSTANTIATE(class LayerNormImplT<void>);

}  // namespace kiln::nn

#ifdef KILN_WITH_CUDA
#include "kiln/cuda/cudnn_batch_norm.hpp"
#endif

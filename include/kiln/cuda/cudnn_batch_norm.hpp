#pragma once
// Training-mode batch norm of CUDA tensors through cuDNN (cuda/cudnn.hpp): cudnnBatchNormalizationForwardTraining
// (the batch statistics, the normalized and scaled output, the running statistics moved in place by momentum with
// the unbiased variance, as PyTorch's) and cudnnBatchNormalizationBackward (the input's, weight's and bias's
// gradients from the saved mean and inverse standard deviation), one node for the three gradients. nn/normalization.hpp
// calls it for float and double inputs [N, C], [N, C, L] or [N, C, H, W] when cuDNN is usable on the device;
// 16-bit inputs (whose statistics cuDNN keeps in float, not in the input's type as kiln's functional batch_norm
// does), synchronized batch norm and evaluation mode (one fused expression already: x * scale + shift) keep kiln's
// own path.
#include <climits>

#include "kiln/cuda/cudnn.hpp"
#include "kiln/cuda/evaluate.hpp"
#include "kiln/nn/normalization.hpp"

namespace kiln::detail {

// The descriptors of a batch norm: x (and y, dx, dy) as [N, C, H, W], the per-channel tensors as [1, C, 1, 1].
template <Dtype T>
struct CudnnBatchNorm {
  explicit CudnnBatchNorm(const Shape& s)
      : dnn(cuda::Cudnn::get()),
        x(dnn.tensor_4d(cuda::dnn::data_type<T>(), int(s[0]), int(s[1]), s.size() > 2 ? int(s[2]) : 1,
                        s.size() > 3 ? int(s[3]) : 1)),
        channels(dnn.tensor_4d(cuda::dnn::data_type<T>(), 1, int(s[1]), 1, 1)) {}
  cuda::Cudnn& dnn;
  cuda::Cudnn::OwnedDescriptor x, channels;
};

// A CUDA tensor's memory, or null for an undefined tensor (cuDNN's "not given").
template <class T>
void* device_data(const Tensor<T>& t) {
  return t.defined() ? t.impl().device_bytes() : nullptr;
}

// The gradients of x, weight and bias (each where its edge needs one) from the forward's saved statistics.
template <Dtype T>
struct CudnnBatchNormBackward : autograd::Node {
  CudnnBatchNormBackward(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias, const Tensor<T>& xc,
                         const Tensor<T>& scale, const Tensor<T>& mean, const Tensor<T>& inv_std, double eps)
      : x_(autograd::SavedTensor::input(xc.impl_ptr())),
        scale_(autograd::SavedTensor::input(scale.impl_ptr())),
        mean_(autograd::SavedTensor::input(mean.impl_ptr())),
        inv_std_(autograd::SavedTensor::input(inv_std.impl_ptr())),
        eps_(eps) {
    next_edges.push_back(autograd::gradient_edge(x.impl_ptr()));
    next_edges.push_back(weight.defined() ? autograd::gradient_edge(weight.impl_ptr()) : autograd::Edge{});
    next_edges.push_back(bias.defined() ? autograd::gradient_edge(bias.impl_ptr()) : autograd::Edge{});
  }
  std::string name() const override { return "CudnnBatchNormBackward"; }
  void release_saved() override { x_ = scale_ = mean_ = inv_std_ = {}; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr, nullptr, nullptr};
    NoGradGuard no_grad;
    const Tensor<T> gy = Tensor<T>(grads[0]).contiguous(), x(x_.unpack(*this)), scale(scale_.unpack(*this));
    const Tensor<T> mean(mean_.unpack(*this)), inv_std(inv_std_.unpack(*this));
    const Tensor<T> gx(cuda_empty<T>(x.shape(), x.device())), gw(cuda_empty<T>(scale.shape(), x.device())),
        gb(cuda_empty<T>(scale.shape(), x.device()));
    CudnnBatchNorm<T> d(x.shape());
    cuda::Cudnn& dnn = d.dnn;
    const cuda::dnn::scaling_t<T> one = 1, zero = 0;
    using Backward = int (*)(void*, int, const void*, const void*, const void*, const void*, void*, const void*, void*,
                             const void*, void*, void*, void*, const void*, void*, void*, double, const void*,
                             const void*);
    dnn.require(dnn.symbol<Backward>("cudnnBatchNormalizationBackward")(
                      dnn.handle(x.device().index()), cuda::dnn::kBatchNormSpatial, &one, &zero, &one, &zero,
                      d.x.get(), device_data(x), d.x.get(), device_data(gy), d.x.get(), device_data(gx),
                      d.channels.get(), device_data(scale), device_data(gw), device_data(gb), eps_,
                      device_data(mean), device_data(inv_std)),
                  cat("cudnnBatchNormalizationBackward(", x.shape(), ")"));
    autograd::GradList out(3);
    out[0] = gx.impl_ptr();
    if (next_edges[1].valid()) out[1] = gw.impl_ptr();
    if (next_edges[2].valid()) out[2] = gb.impl_ptr();
    return out;
  }

 private:
  autograd::SavedTensor x_, scale_, mean_, inv_std_;
  double eps_;
};

// Whether training-mode batch_norm of x goes through cuDNN (see the top of this file); the running statistics, when
// given, must both be and be contiguous, as cuDNN moves them in place.
template <Dtype T>
bool cudnn_batch_norm_applies(const Tensor<T>& x, const Tensor<T>& running_mean, const Tensor<T>& running_var,
                              double eps) {
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
    return false;
  } else {
    const bool stats = running_mean.defined() == running_var.defined() &&
                       (!running_mean.defined() || (running_mean.is_contiguous() && running_var.is_contiguous()));
    // cuDNN 8 takes eps >= 1e-5 (CUDNN_BN_MIN_EPSILON), cuDNN 9 any eps >= 0; batches past 880801 PyTorch keeps off
    // cuDNN's batch norm (its kernels' limit), and so does kiln.
    return x.is_cuda() && x.dim() >= 2 && x.dim() <= 4 && x.numel() > 0 && x.numel() < INT_MAX &&
           x.size(0) <= 880801 && stats &&
           eps >= 0 && cuda::Cudnn::usable(x.device().index()) && (eps >= 1e-5 || cuda::Cudnn::get().version() >= 90000);
  }
}

// y = (x - mean) / sqrt(var + eps) * weight + bias with the batch's statistics per channel (dim 1); running_mean and
// running_var (when defined) move by momentum. Records the backward when x, weight or bias requires grad.
template <Dtype T>
Tensor<T> cudnn_batch_norm_training(const Tensor<T>& x, Tensor<T>& running_mean, Tensor<T>& running_var,
                                    const Tensor<T>& weight, const Tensor<T>& bias, double momentum, double eps) {
  const int64_t c = x.size(1);
  for (const Tensor<T>* t : {&weight, &bias})
    check<ShapeError>(!t->defined() || t->numel() == c, "batch_norm: weight and bias need ", c, " values, got shape ",
                      t->shape());
  const Tensor<T> xc = x.detach().contiguous();
  const Tensor<T> scale = weight.defined() ? weight.detach().contiguous() : ones<T>({c}, x.device());
  const Tensor<T> shift = bias.defined() ? bias.detach().contiguous() : zeros<T>({c}, x.device());
  const Tensor<T> y(cuda_empty<T>(x.shape(), x.device())), mean(cuda_empty<T>({c}, x.device())),
      inv_std(cuda_empty<T>({c}, x.device()));
  CudnnBatchNorm<T> d(x.shape());
  cuda::Cudnn& dnn = d.dnn;
  const cuda::dnn::scaling_t<T> one = 1, zero = 0;
  using Forward = int (*)(void*, int, const void*, const void*, void*, const void*, void*, void*, void*, const void*,
                          const void*, double, void*, void*, double, void*, void*);
  dnn.require(dnn.symbol<Forward>("cudnnBatchNormalizationForwardTraining")(
                    dnn.handle(x.device().index()), cuda::dnn::kBatchNormSpatial, &one, &zero, d.x.get(),
                    device_data(xc), d.x.get(), device_data(y), d.channels.get(), device_data(scale),
                    device_data(shift), momentum, device_data(running_mean), device_data(running_var), eps,
                    device_data(mean), device_data(inv_std)),
                cat("cudnnBatchNormalizationForwardTraining(", x.shape(), ")"));
  for (const Tensor<T>* t : {&running_mean, &running_var})
    if (t->defined()) t->impl().storage->bump_version();  // changed in place, as copy_ would
  if (GradMode::is_enabled() && (autograd::requires_grad(x.impl()) || (weight.defined() && autograd::requires_grad(weight.impl())) ||
                                 (bias.defined() && autograd::requires_grad(bias.impl()))))
    autograd::meta_of(y.impl_ptr()).grad_fn =
        std::make_shared<CudnnBatchNormBackward<T>>(x, weight, bias, xc, scale, mean, inv_std, eps);
  return y;
}

}  // namespace kiln::detail

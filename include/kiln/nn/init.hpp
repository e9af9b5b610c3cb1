#pragma once
// Parameter initialization, as torch.nn.init (libtorch's torch::nn::init): uniform_, normal_, constant_, ones_,
// zeros_, eye_, dirac_, xavier_uniform_, xavier_normal_, kaiming_uniform_, kaiming_normal_, trunc_normal_,
// orthogonal_, with calculate_gain and calculate_fan_in_and_fan_out. Each fills its tensor in place without
// recording (as PyTorch's run under no_grad), so it applies to a module's parameters:
//
//   for (auto& [name, p] : model->named_parameters())
//     if (p.dim() >= 2) nn::init::kaiming_normal_(p, 0, nn::init::kFanOut, nn::init::kReLU);
//
// Random draws come from `gen` (kiln::default_generator() when null) on the host, also for CUDA tensors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <utility>
#include <vector>

#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/random.hpp"

namespace kiln::nn::init {

enum Nonlinearity { kLinear, kConv1D, kConv2D, kConv3D, kSigmoid, kTanh, kReLU, kLeakyReLU, kSELU };
enum FanMode { kFanIn, kFanOut };

// The recommended gain for a nonlinearity (torch.nn.init.calculate_gain); param is leaky_relu's negative slope.
inline double calculate_gain(Nonlinearity nonlinearity, double param = 0.01) {
  switch (nonlinearity) {
    case kTanh: return 5.0 / 3;
    case kReLU: return std::numbers::sqrt2;
    case kLeakyReLU: return std::sqrt(2 / (1 + param * param));
    case kSELU: return 3.0 / 4;
    default: return 1;
  }
}

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field, the receptive field being the product
// of the sizes past the first two (a Linear weight [out, in]: in and out; a conv weight [out, in / groups, kh, kw]).
template <Dtype T>
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor<T>& t) {
  check<ShapeError>(t.dim() >= 2, "nn::init: fan in and fan out need a tensor of at least 2 dims, got shape ",
                    t.shape());
  int64_t receptive = 1;
  for (int d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

namespace detail {
// The fills write without recording: a parameter that requires grad is filled as under torch.no_grad().
template <Dtype T, class Fill>
Tensor<T> untracked(const Tensor<T>& t, Fill fill) {
  NoGradGuard no_grad;
  fill(t);
  return t;
}
// Writes host values (row-major) into t, on t's device.
template <Dtype T>
Tensor<T> assign(const Tensor<T>& t, const std::vector<double>& values) {
  Tensor<T> host = empty<T>(t.shape());
  T* p = host.data_ptr();
  for (size_t i = 0; i < values.size(); ++i) p[i] = T(values[i]);
  return untracked(t, [&](Tensor<T> dst) { dst.copy_(host.to(dst.device())); });
}
template <Dtype T>
int64_t fan(const Tensor<T>& t, FanMode mode) {
  const auto [in, out] = calculate_fan_in_and_fan_out(t);
  return mode == kFanIn ? in : out;
}
// The inverse of erf on (-1, 1): Giles' single-precision approximation (2012), then Newton steps to double's.
inline double erfinv(double y) {
  if (std::abs(y) >= 1) return std::copysign(std::numeric_limits<double>::infinity(), y);  // (clamped after)
  const double w = -std::log((1 - y) * (1 + y));
  double x;
  if (w < 5) {
    const double v = w - 2.5;
    x = ((((((((2.81022636e-08 * v + 3.43273939e-07) * v - 3.5233877e-06) * v - 4.39150654e-06) * v +
             0.00021858087) * v - 0.00125372503) * v - 0.00417768164) * v + 0.246640727) * v + 1.50140941) * y;
  } else {
    const double v = std::sqrt(w) - 3;
    x = ((((((((-0.000200214257 * v + 0.000100950558) * v + 0.00134934322) * v - 0.00367342844) * v +
             0.00573950773) * v - 0.0076224613) * v + 0.00943887047) * v + 1.00167406) * v + 2.83297682) * y;
  }
  for (int i = 0; i < 2; ++i) x -= (std::erf(x) - y) / (2 / std::sqrt(std::numbers::pi) * std::exp(-x * x));
  return x;
}
}  // namespace detail

template <Dtype T>
Tensor<T> uniform_(const Tensor<T>& t, double a = 0, double b = 1, Generator* gen = nullptr) {
  return detail::untracked(t, [&](Tensor<T> dst) { kiln::uniform_(dst, a, b, gen); });
}
template <Dtype T>
Tensor<T> normal_(const Tensor<T>& t, double mean = 0, double std = 1, Generator* gen = nullptr) {
  return detail::untracked(t, [&](Tensor<T> dst) { kiln::normal_(dst, mean, std, gen); });
}
template <Dtype T>
Tensor<T> constant_(const Tensor<T>& t, double value) {
  return detail::untracked(t, [&](Tensor<T> dst) { dst.fill_(T(value)); });
}
template <Dtype T>
Tensor<T> ones_(const Tensor<T>& t) { return init::constant_(t, 1); }
template <Dtype T>
Tensor<T> zeros_(const Tensor<T>& t) { return init::constant_(t, 0); }

// The identity matrix in a 2-d tensor (the leading diagonal of a non-square one).
template <Dtype T>
Tensor<T> eye_(const Tensor<T>& t) {
  check<ShapeError>(t.dim() == 2, "nn::init::eye_: needs a 2-d tensor, got shape ", t.shape());
  std::vector<double> values(size_t(t.numel()), 0);
  for (int64_t i = 0; i < std::min(t.size(0), t.size(1)); ++i) values[size_t(i * t.size(1) + i)] = 1;
  return detail::assign(t, values);
}

// The Dirac delta in a convolution weight [out, in, k...] (3 to 5 dims): a convolution with it passes its input's
// channels through (the first min(out / groups, in) of each group), as torch.nn.init.dirac_.
template <Dtype T>
Tensor<T> dirac_(const Tensor<T>& t, int64_t groups = 1) {
  check<ShapeError>(t.dim() >= 3 && t.dim() <= 5, "nn::init::dirac_: needs a 3-, 4- or 5-d tensor, got shape ",
                    t.shape());
  check<std::invalid_argument>(groups >= 1 && t.size(0) % groups == 0, "nn::init::dirac_: ", t.size(0),
                               " output channels do not divide into ", groups, " groups");
  if (t.numel() == 0) return t;
  const int64_t out_per_group = t.size(0) / groups, channels = std::min(out_per_group, t.size(1));
  std::vector<int64_t> strides(size_t(t.dim()), 1);
  for (int d = t.dim() - 2; d >= 0; --d) strides[size_t(d)] = strides[size_t(d + 1)] * t.size(d + 1);
  int64_t centre = 0;  // the offset of the kernel's centre within one [k...] block
  for (int d = 2; d < t.dim(); ++d) centre += t.size(d) / 2 * strides[size_t(d)];
  std::vector<double> values(size_t(t.numel()), 0);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < channels; ++c)
      values[size_t((g * out_per_group + c) * strides[0] + c * strides[1] + centre)] = 1;
  return detail::assign(t, values);
}

// Uniform in [-a, a], a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio, 2010).
template <Dtype T>
Tensor<T> xavier_uniform_(const Tensor<T>& t, double gain = 1, Generator* gen = nullptr) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  if (t.numel() == 0) return t;  // (nothing to fill, as PyTorch's)
  const double a = gain * std::sqrt(6.0 / double(fan_in + fan_out));
  return init::uniform_(t, -a, a, gen);
}
// Normal(0, std), std = gain * sqrt(2 / (fan_in + fan_out)).
template <Dtype T>
Tensor<T> xavier_normal_(const Tensor<T>& t, double gain = 1, Generator* gen = nullptr) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  if (t.numel() == 0) return t;
  const double std = gain * std::sqrt(2.0 / double(fan_in + fan_out));
  return init::normal_(t, 0, std, gen);
}

// Uniform in [-bound, bound], bound = gain * sqrt(3 / fan) with gain = calculate_gain(nonlinearity, a) (He et al.,
// 2015). PyTorch's Linear and Conv2d initialize with a = sqrt(5): bound 1 / sqrt(fan_in).
template <Dtype T>
Tensor<T> kaiming_uniform_(const Tensor<T>& t, double a = 0, FanMode mode = kFanIn,
                           Nonlinearity nonlinearity = kLeakyReLU, Generator* gen = nullptr) {
  const int64_t fan = detail::fan(t, mode);
  if (t.numel() == 0) return t;
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / double(fan));
  return init::uniform_(t, -bound, bound, gen);
}
// Normal(0, std), std = gain / sqrt(fan).
template <Dtype T>
Tensor<T> kaiming_normal_(const Tensor<T>& t, double a = 0, FanMode mode = kFanIn,
                          Nonlinearity nonlinearity = kLeakyReLU, Generator* gen = nullptr) {
  const int64_t fan = detail::fan(t, mode);
  if (t.numel() == 0) return t;
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(double(fan));
  return init::normal_(t, 0, std, gen);
}

// Normal(mean, std) truncated to [a, b], by the inverse of its distribution function (as PyTorch's): a uniform
// draw between the normal's CDF at a and at b, mapped back through erfinv, so no draw is rejected however far
// the interval lies in the tail (where the CDF's rounding then limits the precision, as in PyTorch).
template <Dtype T>
Tensor<T> trunc_normal_(const Tensor<T>& t, double mean = 0, double std = 1, double a = -2, double b = 2,
                        Generator* gen = nullptr) {
  check<std::invalid_argument>(std > 0 && a < b, "nn::init::trunc_normal_: needs std > 0 and a < b, got std ", std,
                               ", a ", a, ", b ", b);
  const auto cdf = [&](double x) { return (1 + std::erf((x - mean) / std / std::numbers::sqrt2)) / 2; };
  const double lo = 2 * cdf(a) - 1, hi = 2 * cdf(b) - 1;
  std::vector<double> u(size_t(t.numel()));
  kiln::fill_uniform(kiln::detail::generator_or_default(gen), u.data(), int64_t(u.size()), lo, hi);
  for (double& x : u) x = std::clamp(mean + std * std::numbers::sqrt2 * detail::erfinv(x), a, b);
  return detail::assign(t, u);
}

// A (semi-)orthogonal matrix times gain, as torch.nn.init.orthogonal_: t viewed as [size(0), numel / size(0)]
// gets the Q of the QR factorization of a normal matrix (of its transpose when it is wide), the signs fixed so
// that R's diagonal is positive; its rows (wide) or columns (tall) are orthonormal.
template <Dtype T>
Tensor<T> orthogonal_(const Tensor<T>& t, double gain = 1, Generator* gen = nullptr) {
  check<ShapeError>(t.dim() >= 2, "nn::init::orthogonal_: needs a tensor of at least 2 dims, got shape ", t.shape());
  if (t.numel() == 0) return t;
  const int64_t rows = t.size(0), cols = t.numel() / rows;
  const int64_t m = std::max(rows, cols), n = std::min(rows, cols);  // the tall matrix factorized, m x n
  std::vector<double> draws(size_t(rows * cols));
  kiln::fill_normal(kiln::detail::generator_or_default(gen), draws.data(), int64_t(draws.size()), 0, 1);
  // Column j of the tall matrix: draws[i * cols + j] when tall, draws[j * cols + i] (the transpose) when wide.
  std::vector<std::vector<double>> q(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(m)));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i)
      q[size_t(j)][size_t(i)] = rows >= cols ? draws[size_t(i * cols + j)] : draws[size_t(j * cols + i)];
  // Modified Gram-Schmidt, run twice per column ("twice is enough"): the Q whose R has a positive diagonal,
  // which is Householder QR's Q with the signs fixed as PyTorch fixes them.
  for (int64_t j = 0; j < n; ++j) {
    std::vector<double>& v = q[size_t(j)];
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t k = 0; k < j; ++k) {
        double dot = 0;
        for (int64_t i = 0; i < m; ++i) dot += q[size_t(k)][size_t(i)] * v[size_t(i)];
        for (int64_t i = 0; i < m; ++i) v[size_t(i)] -= dot * q[size_t(k)][size_t(i)];
      }
    double norm = 0;
    for (double x : v) norm += x * x;
    norm = std::sqrt(norm);
    for (double& x : v) x /= norm;
  }
  std::vector<double> values(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      values[size_t(r * cols + c)] = gain * (rows >= cols ? q[size_t(c)][size_t(r)] : q[size_t(r)][size_t(c)]);
  return detail::assign(t, values);
}

}  // namespace kiln::nn::init

#pragma once
// Training-mode batch normalization as one node: the per-channel statistics in two passes over x, the
// output in a third (y = x * a + b per channel), and a backward that needs two passes (the per-channel sums
// of g and g * (x - mean), then dx = g * k1 + x * k2 + k3), as PyTorch's native kernel. Composed from
// reductions and fused expressions it took about ten passes and several broadcast temporaries.
//   dx = w * invstd * (g - mean(g) - (x - mean) * invstd^2 * mean(g * (x - mean)))
//   dweight = sum(g * (x - mean)) * invstd,  dbias = sum(g)     (sums over every dim but the channel)
#include <cmath>
#include <functional>
#include <vector>

#include "kiln/cpu/parallel.hpp"
#include "kiln/cpu/partial_sum.hpp"
#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn::functional::detail {

// x [N, C, ...] as N blocks of C planes of `plane` contiguous elements.
struct ChannelPlanes {
  int64_t n, c, plane;
  explicit ChannelPlanes(const Shape& s) : n(s[0]), c(s[1]), plane(numel_of(s) / std::max<int64_t>(s[0] * s[1], 1)) {}
  int64_t count() const { return n * plane; }  // values per channel
  template <class T>
  static T* at(T* base, const ChannelPlanes& l, int64_t i, int64_t ch) { return base + (i * l.c + ch) * l.plane; }
};

// Per channel: sum over its planes of term(plane pointer(s), j); threads split the channels.
template <class Sum>
std::vector<double> per_channel(const ChannelPlanes& l, Sum&& plane_sum) {
  std::vector<double> out(size_t(l.c));
  cpu::parallel_for(l.c, 2 * l.count(), 1, [&](int64_t b, int64_t e) {
    for (int64_t ch = b; ch < e; ++ch) {
      double total = 0;
      for (int64_t i = 0; i < l.n; ++i) total += plane_sum(i, ch);
      out[size_t(ch)] = total;
    }
  });
  return out;
}

// out = x * scale[c] + shift[c] (and, when given, + g * gscale[c]) over every plane; threads split the planes.
template <class T>
void per_channel_affine(const ChannelPlanes& l, const T* x, const std::vector<double>& scale,
                        const std::vector<double>& shift, T* out, const T* g = nullptr,
                        const std::vector<double>* gscale = nullptr) {
  cpu::parallel_for(l.n * l.c, 2 * l.plane, 1, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      const int64_t ch = q % l.c;
      const T* xp = x + q * l.plane;
      T* op = out + q * l.plane;
      const compute_t<T> a = compute_t<T>(scale[size_t(ch)]), s = compute_t<T>(shift[size_t(ch)]);
      if (g) {
        const T* gp = g + q * l.plane;
        const compute_t<T> k = compute_t<T>((*gscale)[size_t(ch)]);
        for (int64_t j = 0; j < l.plane; ++j) op[j] = T(compute_t<T>(gp[j]) * k + compute_t<T>(xp[j]) * a + s);
      } else {
        for (int64_t j = 0; j < l.plane; ++j) op[j] = T(compute_t<T>(xp[j]) * a + s);
      }
    }
  });
}

// Per channel: the sum of its values in double.
template <class T>
std::vector<double> channel_sums(const ChannelPlanes& l, const T* x) {
  return per_channel(l, [&](int64_t i, int64_t ch) {
    const T* p = ChannelPlanes::at(x, l, i, ch);
    return cpu::partial_sum(l.plane, [p](int64_t j) { return double(compute_t<T>(p[j])); });
  });
}

struct BatchNormStats {
  std::vector<double> mean, var;  // biased variance
  double count = 0;               // values per channel they are over (all replicas' for a synchronized one)
};

// Synchronized batch norm (nn::SyncBatchNorm): how to sum over the replicas. `host` sums a vector in place (the
// CPU path, whose node computes the statistics in host memory); `device` returns the sum over the replicas of a
// CUDA tensor, recorded by autograd (the CUDA path, whose statistics are expressions). Empty: this process only.
struct ReplicaSum {
  std::function<void(std::vector<double>&)> host;
  std::function<Tensor<float>(const Tensor<float>&)> device;
  explicit operator bool() const { return bool(host); }
};

// `sums` followed by `extra`, summed over the replicas; extra's sum comes back in extra.
inline void replica_sum(const ReplicaSum& reduce, std::vector<double>& sums, double* extra = nullptr) {
  if (!reduce) return;
  if (extra) sums.push_back(*extra);
  reduce.host(sums);
  if (extra) {
    *extra = sums.back();
    sums.pop_back();
  }
}

template <class T>
BatchNormStats batch_norm_stats(const ChannelPlanes& l, const T* x, const ReplicaSum& reduce = {}) {
  BatchNormStats s;
  s.count = double(l.count());
  s.mean = channel_sums(l, x);
  replica_sum(reduce, s.mean, &s.count);
  const double m = s.count;
  for (double& v : s.mean) v /= m;
  s.var = per_channel(l, [&](int64_t i, int64_t ch) {
    const T* p = ChannelPlanes::at(x, l, i, ch);
    const double mu = s.mean[size_t(ch)];
    return cpu::partial_sum(l.plane, [p, mu](int64_t j) {
      const double d = double(compute_t<T>(p[j])) - mu;
      return d * d;
    });
  });
  replica_sum(reduce, s.var);
  for (double& v : s.var) v /= m;
  return s;
}

}  // namespace kiln::nn::functional::detail

namespace kiln::nn::autograd_nodes {

template <Dtype T>
struct BatchNormBackward : autograd::Node {
  BatchNormBackward(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias, std::vector<double> w,
                    std::vector<double> mean, std::vector<double> invstd, double count,
                    functional::detail::ReplicaSum reduce)
      : x_(x.impl_ptr()),
        w_(std::move(w)),
        mean_(std::move(mean)),
        invstd_(std::move(invstd)),
        count_(count),
        reduce_(std::move(reduce)) {
    next_edges.push_back(autograd::gradient_edge(x.impl_ptr()));
    next_edges.push_back(weight.defined() ? autograd::gradient_edge(weight.impl_ptr()) : autograd::Edge{});
    next_edges.push_back(bias.defined() ? autograd::gradient_edge(bias.impl_ptr()) : autograd::Edge{});
  }
  std::string name() const override { return "NativeBatchNormBackward"; }

  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr, nullptr, nullptr};
    using functional::detail::ChannelPlanes;
    const Tensor<T> x(x_.unpack(*this));
    const Tensor<T> g = Tensor<T>(grads[0]).contiguous();
    const ChannelPlanes l(x.shape());
    const T* xp = x.data_ptr();
    const T* gp = g.data_ptr();
    std::vector<double> sum_g = functional::detail::channel_sums(l, gp);
    std::vector<double> sum_gx = functional::detail::per_channel(l, [&](int64_t i, int64_t ch) {
      const T* p = ChannelPlanes::at(gp, l, i, ch);
      const T* q = ChannelPlanes::at(xp, l, i, ch);
      const double mu = mean_[size_t(ch)];
      return cpu::partial_sum(l.plane, [p, q, mu](int64_t j) {
        return double(compute_t<T>(p[j])) * (double(compute_t<T>(q[j])) - mu);
      });
    });
    // Synchronized: dx needs the sums over every replica (dweight and dbias stay this replica's: DDP averages
    // them as any parameter's gradient).
    std::vector<double> local_g, local_gx;
    if (reduce_) {
      local_g = sum_g;
      local_gx = sum_gx;
      std::vector<double> both = sum_g;
      both.insert(both.end(), sum_gx.begin(), sum_gx.end());
      reduce_.host(both);
      sum_g.assign(both.begin(), both.begin() + l.c);
      sum_gx.assign(both.begin() + l.c, both.end());
    }
    const std::vector<double>& own_g = reduce_ ? local_g : sum_g;
    const std::vector<double>& own_gx = reduce_ ? local_gx : sum_gx;
    const double m = count_;
    std::vector<double> k1(size_t(l.c)), k2(size_t(l.c)), k3(size_t(l.c));
    Tensor<T> dweight = empty<T>({l.c}), dbias = empty<T>({l.c});
    for (int64_t ch = 0; ch < l.c; ++ch) {
      const size_t c = size_t(ch);
      const double w = w_[c], is = invstd_[c];
      const double mean_g = sum_g[c] / m, mean_gx = sum_gx[c] / m;
      k1[c] = w * is;
      k2[c] = -w * is * is * is * mean_gx;
      k3[c] = w * is * (is * is * mean_gx * mean_[c] - mean_g);
      dweight.data_ptr()[ch] = T(own_gx[c] * is);
      dbias.data_ptr()[ch] = T(own_g[c]);
    }
    Tensor<T> dx = empty<T>(x.shape());
    functional::detail::per_channel_affine(l, xp, k2, k3, dx.data_ptr(), gp, &k1);
    return {dx.impl_ptr(), next_edges[1].valid() ? dweight.impl_ptr() : nullptr,
            next_edges[2].valid() ? dbias.impl_ptr() : nullptr};
  }

 private:
  autograd::SavedTensor x_;
  std::vector<double> w_, mean_, invstd_;  // the weight as the forward used it (1 without a weight)
  double count_;                           // values per channel over all replicas
  functional::detail::ReplicaSum reduce_;
};

}  // namespace kiln::nn::autograd_nodes

namespace kiln::nn::functional::detail {

// Training-mode batch norm of x [N, C, ...]: y, and the batch statistics (mean, biased variance) for
// the running estimates. With `reduce`, the statistics and the backward's sums are over every replica's batch.
template <Dtype T>
Tensor<T> batch_norm_training(const Tensor<T>& x_in, const Tensor<T>& weight, const Tensor<T>& bias, double eps,
                              BatchNormStats& stats, const ReplicaSum& reduce = {}) {
  const Tensor<T> x = x_in.contiguous();
  const ChannelPlanes l(x.shape());
  stats = batch_norm_stats(l, x.data_ptr(), reduce);
  auto values = [&](const Tensor<T>& t, double fallback) {
    std::vector<double> v(size_t(l.c), fallback);
    if (!t.defined()) return v;
    check<ShapeError>(t.numel() == l.c, "batch_norm: weight and bias need ", l.c, " values, got shape ", t.shape());
    const Tensor<T> tc = t.contiguous();
    for (int64_t ch = 0; ch < l.c; ++ch) v[size_t(ch)] = double(compute_t<T>(tc.data_ptr()[ch]));
    return v;
  };
  std::vector<double> w = values(weight, 1.0), b = values(bias, 0.0);
  std::vector<double> invstd(size_t(l.c)), scale(size_t(l.c)), shift(size_t(l.c));
  for (size_t c = 0; c < size_t(l.c); ++c) {
    invstd[c] = 1 / std::sqrt(stats.var[c] + eps);
    scale[c] = w[c] * invstd[c];
    shift[c] = b[c] - stats.mean[c] * scale[c];
  }
  Tensor<T> y = empty<T>(x.shape());
  per_channel_affine(l, x.data_ptr(), scale, shift, y.data_ptr());
  const bool needs_grad = x.requires_grad() || (weight.defined() && weight.requires_grad()) ||
                          (bias.defined() && bias.requires_grad());
  if (GradMode::is_enabled() && needs_grad)
    autograd::meta_of(y.impl_ptr()).grad_fn =
        std::make_shared<autograd_nodes::BatchNormBackward<T>>(x, weight, bias, std::move(w), stats.mean, invstd,
                                                              stats.count, reduce);
  return y;
}

}  // namespace kiln::nn::functional::detail

#pragma once
// Pooling as torch.nn.functional's: max_pool2d (kernel, stride, padding, dilation), avg_pool2d (kernel,
// stride, padding, count_include_pad) and adaptive_avg_pool2d, with the MaxPool2d, AvgPool2d and
// AdaptiveAvgPool2d modules. Direct loops over each (sample, channel) plane, threaded; max pooling saves
// the argmax of each window for its backward. CUDA tensors pool on their device (cuda/pool.hpp, in builds with
// KILN_WITH_CUDA), forward and backward.
#include <array>
#include <bit>
#include <limits>

#include "kiln/cpu/parallel.hpp"
#include "kiln/nn/module.hpp"

#ifdef KILN_WITH_CUDA
namespace kiln::nn::functional::detail {
struct PoolWindows;
}
namespace kiln::detail {
// A pooling or its backward on CUDA tensors, src into dst (cuda/pool.hpp, included at the end of this file in such
// builds); index: max pooling's argmax, written by Max, read by MaxBackward.
enum class CudaPool { Max, MaxBackward, Avg, AvgBackward };
template <CudaPool P, Dtype T>
void cuda_pool(const Tensor<T>& src, const Tensor<T>& dst, const Tensor<int64_t>& index,
               const nn::functional::detail::PoolWindows& win, bool count_pad);
}  // namespace kiln::detail
#endif

namespace kiln::nn {

namespace functional {
namespace detail {

// A window [r0, r1) x [c0, c1) of an input plane for each output position.
struct PoolWindows {
  int64_t h, w, ho, wo;
  // Fixed windows: kernel k, stride s, padding p, dilation d (rows and cols).
  std::array<int64_t, 2> k{}, s{}, p{}, d{1, 1};
  bool adaptive = false;
  void rows(int64_t oh, int64_t& r0, int64_t& r1) const { span(oh, h, ho, 0, r0, r1); }
  void cols(int64_t ow, int64_t& c0, int64_t& c1) const { span(ow, w, wo, 1, c0, c1); }
  void span(int64_t o, int64_t in, int64_t out, int a, int64_t& lo, int64_t& hi) const {
    if (adaptive) {
      lo = o * in / out;
      hi = ((o + 1) * in + out - 1) / out;
    } else {
      lo = o * s[a] - p[a];
      hi = lo + (k[a] - 1) * d[a] + 1;
    }
  }
};

inline int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, const char* op) {
  check<std::invalid_argument>(k > 0 && s > 0 && d > 0 && p >= 0 && 2 * p <= k, op,
                               ": kernel and stride must be positive and padding at most half the kernel");
  const int64_t span = in + 2 * p - d * (k - 1) - 1;  // negative: the window does not fit (no rounding toward 0)
  const int64_t out = span < 0 ? 0 : span / s + 1;
  check<ShapeError>(out > 0, op, ": input size ", in, " is smaller than the kernel ", k);
  return out;
}

}  // namespace detail
}  // namespace functional

namespace autograd_nodes {
// Max pooling: each output's gradient goes to its window's argmax (saved as a flat index in the plane).
template <Dtype T>
struct MaxPoolBackward : autograd::Node {
  MaxPoolBackward(const autograd::ImplPtr& x, Tensor<int64_t> argmax, const functional::detail::PoolWindows& win)
      : shape_(x->shape), argmax_(std::move(argmax)), win_(win) {
    next_edges.push_back(autograd::gradient_edge(x));
  }
  std::string name() const override { return "MaxPool2DBackward"; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr};
    const Tensor<T> g = Tensor<T>(grads[0]).contiguous();
#ifdef KILN_WITH_CUDA
    if (g.is_cuda()) {
      const Tensor<T> gx = empty<T>(shape_, g.device());
      kiln::detail::cuda_pool<kiln::detail::CudaPool::MaxBackward>(g, gx, argmax_, win_, false);
      return {gx.impl_ptr()};
    }
#endif
    Tensor<T> gx = zeros<T>(shape_);
    const int64_t planes = shape_[0] * shape_[1], in = shape_[2] * shape_[3], out = g.numel() / std::max<int64_t>(planes, 1);
    const T* gp = g.data_ptr();
    const int64_t* ip = argmax_.data_ptr();
    T* xp = gx.data_ptr();
    cpu::parallel_for(planes, out, 1, [&](int64_t b, int64_t e) {
      for (int64_t q = b; q < e; ++q)
        for (int64_t o = 0; o < out; ++o) {
          T& to = xp[q * in + ip[q * out + o]];
          to = T(compute_t<T>(to) + compute_t<T>(gp[q * out + o]));  // bfloat16 adds in float
        }
    });
    return {gx.impl_ptr()};
  }

 private:
  Shape shape_;
  Tensor<int64_t> argmax_;
  functional::detail::PoolWindows win_;
};

// Average pooling: each output's gradient, divided by its divisor, spread over its window.
template <Dtype T>
struct AvgPoolBackward : autograd::Node {
  AvgPoolBackward(const autograd::ImplPtr& x, functional::detail::PoolWindows win, bool count_pad)
      : shape_(x->shape), win_(win), count_pad_(count_pad) {
    next_edges.push_back(autograd::gradient_edge(x));
  }
  std::string name() const override { return win_.adaptive ? "AdaptiveAvgPool2DBackward" : "AvgPool2DBackward"; }
  autograd::GradList apply(autograd::GradList&& grads) override;

 private:
  Shape shape_;
  functional::detail::PoolWindows win_;
  bool count_pad_;
};
}  // namespace autograd_nodes

namespace functional {
namespace detail {

// For each plane and output position: f(plane, o, r0, r1, c0, c1, divisor) with the window clipped to
// the input and the divisor (the full window with padding when count_pad, else the clipped one).
template <class F>
void for_each_window(int64_t planes, const PoolWindows& win, bool count_pad, F&& f) {
  cpu::parallel_for(planes, win.ho * win.wo * 4, 1, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q)
      for (int64_t oh = 0; oh < win.ho; ++oh) {
        int64_t r0, r1;
        win.rows(oh, r0, r1);
        for (int64_t ow = 0; ow < win.wo; ++ow) {
          int64_t c0, c1;
          win.cols(ow, c0, c1);
          const int64_t full = (r1 - r0) * (c1 - c0);
          const int64_t cr0 = std::max<int64_t>(r0, 0), cr1 = std::min(r1, win.h);
          const int64_t cc0 = std::max<int64_t>(c0, 0), cc1 = std::min(c1, win.w);
          const int64_t divisor = count_pad && !win.adaptive ? std::min(full, (std::min(r1, win.h + win.p[0]) - r0) *
                                                                                  (std::min(c1, win.w + win.p[1]) - c0))
                                                             : (cr1 - cr0) * (cc1 - cc0);
          f(q, oh * win.wo + ow, cr0, cr1, cc0, cc1, divisor);
        }
      }
  });
}

template <Dtype T>
void avg_pool_cpu(const Tensor<T>& xc, const PoolWindows& win, bool count_pad, const Tensor<T>& out) {
  const T* xp = xc.data_ptr();
  T* op = out.data_ptr();
  const int64_t in = win.h * win.w, on = win.ho * win.wo;
  for_each_window(xc.size(0) * xc.size(1), win, count_pad,
                  [&](int64_t q, int64_t o, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t divisor) {
                    double s = 0;
                    for (int64_t r = r0; r < r1; ++r)
                      for (int64_t c = c0; c < c1; ++c) s += double(xp[q * in + r * win.w + c]);
                    op[q * on + o] = T(s / double(divisor));
                  });
}

template <Dtype T>
Tensor<T> avg_pool(const Tensor<T>& x, const PoolWindows& win, bool count_pad) {
  const Tensor<T> xc = x.contiguous();
  Tensor<T> out(TensorImpl::allocate({x.size(0), x.size(1), win.ho, win.wo}, scalar_type_of<T>(), "avg_pool2d", x.device()));
#ifdef KILN_WITH_CUDA
  if (x.is_cuda())
    kiln::detail::cuda_pool<kiln::detail::CudaPool::Avg>(xc, out, Tensor<int64_t>(), win, count_pad);
  else
#endif
    avg_pool_cpu(xc, win, count_pad, out);
  if constexpr (is_floating_v<T>) {
    if (GradMode::is_enabled() && x.requires_grad())
      autograd::meta_of(out.impl_ptr()).grad_fn = std::make_shared<autograd_nodes::AvgPoolBackward<T>>(x.impl_ptr(), win, count_pad);
  }
  return out;
}

// The maximum of a window's taps and where it is, offered in row-major order: a greater value replaces it,
// and the first NaN wins and stays, as PyTorch's. The selects are bit masks: written as ternaries, the
// compiler turned them back into branches that random data mispredicts (the 2x2 pool ran 4x slower).
template <class C>
struct RunningMax {
  using Bits = std::conditional_t<sizeof(C) == 4, uint32_t, uint64_t>;
  Bits best;
  int64_t at;
  RunningMax(C v, int64_t index) : best(std::bit_cast<Bits>(v)), at(index) {}
  void offer(C v, int64_t index) {
    const C current = value();
    const int64_t take = -int64_t(int(!(v <= current)) & int(current == current));
    best ^= (best ^ std::bit_cast<Bits>(v)) & Bits(take);
    at ^= (at ^ index) & take;
  }
  C value() const { return std::bit_cast<C>(best); }
};

inline void check_4d(const char* op, const Shape& s) {
  check<ShapeError>(s.size() == 4, op, ": expected a 4-d input [N, C, H, W], got ", s);
}

// max_pool2d's loops: out and argmax (allocated) from contiguous xc.
template <Dtype T>
void max_pool_cpu(const Tensor<T>& xc, const PoolWindows& win, const Tensor<T>& out, const Tensor<int64_t>& argmax) {
  const int64_t planes = xc.size(0) * xc.size(1), in = win.h * win.w, on = win.ho * win.wo;
  const T* xp = xc.data_ptr();
  T* op = out.data_ptr();
  int64_t* ap = argmax.data_ptr();
  // The kernel taps that fall inside the input, [first, last), for output position o along one dim.
  auto taps = [](int64_t o, int64_t s, int64_t p, int64_t d, int64_t k, int64_t size, int64_t& first, int64_t& last) {
    const int64_t start = o * s - p;
    first = start >= 0 ? 0 : (-start + d - 1) / d;
    last = std::min(k, size - start <= 0 ? 0 : (size - start + d - 1) / d);
  };
  // Plain locals, not captured references: the compiler keeps them in registers.
  const int64_t h = win.h, w = win.w, ho = win.ho, wo = win.wo, kh = win.k[0], kw = win.k[1];
  const int64_t sh = win.s[0], sw = win.s[1], ph = win.p[0], pw = win.p[1], dh = win.d[0], dw = win.d[1];
  using Max = detail::RunningMax<compute_t<T>>;
  if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && dh == 1 && dw == 1) {
    // The common 2x2 window, stride 2, no padding or dilation: the four taps by hand.
    cpu::parallel_for(planes, on * 4, 1, [=](int64_t b, int64_t e) {
      for (int64_t q = b; q < e; ++q)
        for (int64_t oh = 0; oh < ho; ++oh) {
          const T* r0 = xp + q * in + 2 * oh * w;
          for (int64_t ow = 0; ow < wo; ++ow) {
            const int64_t c = 2 * oh * w + 2 * ow;
            Max m(compute_t<T>(r0[2 * ow]), c);
            m.offer(compute_t<T>(r0[2 * ow + 1]), c + 1);
            m.offer(compute_t<T>(r0[w + 2 * ow]), c + w);
            m.offer(compute_t<T>(r0[w + 2 * ow + 1]), c + w + 1);
            op[q * on + oh * wo + ow] = T(m.value());
            ap[q * on + oh * wo + ow] = m.at;
          }
        }
    });
  } else {
    cpu::parallel_for(planes, on * kh * kw, 1, [=](int64_t b, int64_t e) {
      for (int64_t q = b; q < e; ++q) {
        const T* plane = xp + q * in;
        for (int64_t oh = 0; oh < ho; ++oh) {
          int64_t i0, i1;
          taps(oh, sh, ph, dh, kh, h, i0, i1);
          for (int64_t ow = 0; ow < wo; ++ow) {
            int64_t j0, j1;
            taps(ow, sw, pw, dw, kw, w, j0, j1);
            Max m(-std::numeric_limits<compute_t<T>>::infinity(), (oh * sh - ph + i0 * dh) * w + ow * sw - pw + j0 * dw);
            for (int64_t i = i0; i < i1; ++i) {
              const int64_t r = (oh * sh - ph + i * dh) * w;
              for (int64_t j = j0; j < j1; ++j) {
                const int64_t c = r + ow * sw - pw + j * dw;
                m.offer(compute_t<T>(plane[c]), c);
              }
            }
            op[q * on + oh * wo + ow] = T(m.value());
            ap[q * on + oh * wo + ow] = m.at;
          }
        }
      }
    });
  }
}

}  // namespace detail

template <Dtype T>
Tensor<T> max_pool2d(const Tensor<T>& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                     std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1}) {
  detail::check_4d("max_pool2d", x.shape());
  if (stride[0] == 0) stride = kernel;  // PyTorch's default: the kernel size
  detail::PoolWindows win{x.size(2), x.size(3), 0, 0, kernel, stride, padding, dilation};
  win.ho = detail::pooled_size(win.h, kernel[0], stride[0], padding[0], dilation[0], "max_pool2d");
  win.wo = detail::pooled_size(win.w, kernel[1], stride[1], padding[1], dilation[1], "max_pool2d");
  const Tensor<T> xc = x.contiguous();
  Tensor<T> out(TensorImpl::allocate({x.size(0), x.size(1), win.ho, win.wo}, scalar_type_of<T>(), "max_pool2d", x.device()));
  Tensor<int64_t> argmax(TensorImpl::allocate(out.shape(), ScalarType::Int64, "max_pool2d", x.device()));
#ifdef KILN_WITH_CUDA
  if (x.is_cuda())
    kiln::detail::cuda_pool<kiln::detail::CudaPool::Max>(xc, out, argmax, win, false);
  else
#endif
    detail::max_pool_cpu(xc, win, out, argmax);
  if constexpr (is_floating_v<T>) {
    if (GradMode::is_enabled() && x.requires_grad())
      autograd::meta_of(out.impl_ptr()).grad_fn = std::make_shared<autograd_nodes::MaxPoolBackward<T>>(x.impl_ptr(), argmax, win);
  }
  return out;
}

template <Dtype T>
Tensor<T> avg_pool2d(const Tensor<T>& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                     std::array<int64_t, 2> padding = {0, 0}, bool count_include_pad = true) {
  detail::check_4d("avg_pool2d", x.shape());
  if (stride[0] == 0) stride = kernel;
  detail::PoolWindows win{x.size(2), x.size(3), 0, 0, kernel, stride, padding};
  win.ho = detail::pooled_size(win.h, kernel[0], stride[0], padding[0], 1, "avg_pool2d");
  win.wo = detail::pooled_size(win.w, kernel[1], stride[1], padding[1], 1, "avg_pool2d");
  return detail::avg_pool(x, win, count_include_pad);
}

template <Dtype T>
Tensor<T> adaptive_avg_pool2d(const Tensor<T>& x, std::array<int64_t, 2> output_size) {
  detail::check_4d("adaptive_avg_pool2d", x.shape());
  check<std::invalid_argument>(output_size[0] > 0 && output_size[1] > 0, "adaptive_avg_pool2d: output size must be positive");
  detail::PoolWindows win{x.size(2), x.size(3), output_size[0], output_size[1]};
  win.adaptive = true;
  return detail::avg_pool(x, win, false);
}

}  // namespace functional

template <Dtype T>
autograd::GradList autograd_nodes::AvgPoolBackward<T>::apply(autograd::GradList&& grads) {
  if (!grads.at(0)) return {nullptr};
  const Tensor<T> g = Tensor<T>(grads[0]).contiguous();
#ifdef KILN_WITH_CUDA
  if (g.is_cuda()) {
    const Tensor<T> gx = empty<T>(shape_, g.device());
    kiln::detail::cuda_pool<kiln::detail::CudaPool::AvgBackward>(g, gx, Tensor<int64_t>(), win_, count_pad_);
    return {gx.impl_ptr()};
  }
#endif
  Tensor<T> gx = zeros<T>(shape_);
  const T* gp = g.data_ptr();
  T* xp = gx.data_ptr();
  const int64_t in = win_.h * win_.w, on = win_.ho * win_.wo;
  // One thread per plane: windows of one plane overlap, planes do not.
  functional::detail::for_each_window(shape_[0] * shape_[1], win_, count_pad_,
                                      [&](int64_t q, int64_t o, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t divisor) {
                                        const T share = T(compute_t<T>(gp[q * on + o]) / compute_t<T>(divisor));
                                        for (int64_t r = r0; r < r1; ++r)
                                          for (int64_t c = c0; c < c1; ++c) xp[q * in + r * win_.w + c] += share;
                                      });
  return {gx.impl_ptr()};
}

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(int64_t kernel, int64_t stride = 0, int64_t padding = 0)
      : Module("MaxPool2d"), k_(kernel), s_(stride ? stride : kernel), p_(padding) {}
  KILN_DECL Tensor<float> forward(const Tensor<float>& x) override;
  KILN_DECL void pretty_print(std::ostream& out) const override;

 private:
  int64_t k_, s_, p_;
};
KILN_MODULE(MaxPool2d);

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(int64_t kernel, int64_t stride = 0, int64_t padding = 0)
      : Module("AvgPool2d"), k_(kernel), s_(stride ? stride : kernel), p_(padding) {}
  KILN_DECL Tensor<float> forward(const Tensor<float>& x) override;
  KILN_DECL void pretty_print(std::ostream& out) const override;

 private:
  int64_t k_, s_, p_;
};
KILN_MODULE(AvgPool2d);

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(std::array<int64_t, 2> output_size) : Module("AdaptiveAvgPool2d"), size_(output_size) {}
  AdaptiveAvgPool2dImpl(int64_t h, int64_t w) : AdaptiveAvgPool2dImpl(std::array<int64_t, 2>{h, w}) {}
  KILN_DECL Tensor<float> forward(const Tensor<float>& x) override;
  KILN_DECL void pretty_print(std::ostream& out) const override;

 private:
  std::array<int64_t, 2> size_;
};
KILN_MODULE(AdaptiveAvgPool2d);

#if KILN_HEADER_DEFINITIONS
KILN_DECL Tensor<float> MaxPool2dImpl::forward(const Tensor<float>& x) {
  return functional::max_pool2d(x, {k_, k_}, {s_, s_}, {p_, p_});
}
KILN_DECL void MaxPool2dImpl::pretty_print(std::ostream& out) const {
  out << "MaxPool2d(kernel_size=" << k_ << ", stride=" << s_ << ", padding=" << p_ << ')';
}
KILN_DECL Tensor<float> AvgPool2dImpl::forward(const Tensor<float>& x) {
  return functional::avg_pool2d(x, {k_, k_}, {s_, s_}, {p_, p_});
}
KILN_DECL void AvgPool2dImpl::pretty_print(std::ostream& out) const {
  out << "AvgPool2d(kernel_size=" << k_ << ", stride=" << s_ << ", padding=" << p_ << ')';
}
KILN_DECL Tensor<float> AdaptiveAvgPool2dImpl::forward(const Tensor<float>& x) {
  return functional::adaptive_avg_pool2d(x, size_);
}
KILN_DECL void AdaptiveAvgPool2dImpl::pretty_print(std::ostream& out) const {
  out << "AdaptiveAvgPool2d(output_size=(" << size_[0] << ", " << size_[1] << "))";
}
#endif  // KILN_HEADER_DEFINITIONS

// The float poolings are compiled once in a separately compiled program's part (core/config.hpp).
KILN_INSTANTIATE(Tensor<float> functional::max_pool2d<float>(const Tensor<float>&, std::array<int64_t, 2>,
                                                             std::array<int64_t, 2>, std::array<int64_t, 2>,
                                                             std::array<int64_t, 2>));
KILN_INSTANTIATE(Tensor<float> functional::avg_pool2d<float>(const Tensor<float>&, std::array<int64_t, 2>,
                                                             std::array<int64_t, 2>, std::array<int64_t, 2>, bool));
KILN_INSTANTIATE(Tensor<float> functional::adaptive_avg_pool2d<float>(const Tensor<float>&, std::array<int64_t, 2>));

}  // namespace kiln::nn

#ifdef KILN_WITH_CUDA
#include "kiln/cuda/pool.hpp"
#endif

#pragma once
// Image transforms, as torchvision.transforms': Normalize, RandomCrop (with zero padding), RandomHorizontalFlip
// and Compose.
//
// A transform maps float images of shape (..., C, H, W) to new ones: a single image (C, H, W) or a batch
// (N, C, H, W), each index into the leading dims being one image that gets its own random draw. The DataLoader
// applies its transform to each collated batch, so a transform runs once per batch rather than once per sample.
// Randomness comes only from the Generator argument (the DataLoader passes one derived from the seed, the epoch
// and the batch index); the deterministic transforms ignore it. Each random transform reserves its draws from
// the generator in one go, image i taking element i of them, so a result depends only on the generator's state.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "kiln/core/generator.hpp"
#include "kiln/cpu/parallel.hpp"
#include "kiln/tensor/factory.hpp"

namespace kiln::data::transforms {

using Transform = std::function<Tensor<float>(const Tensor<float>&, Generator&)>;

namespace detail {

// x as images: `count` images (the product of the leading dims) of `channels` planes of h x w.
struct Images {
  int64_t count, channels, h, w;
};

inline Images images_of(const Tensor<float>& x, const char* op) {
  check<ShapeError>(x.dim() >= 3, op, ": expected images of shape (..., C, H, W), got shape ", x.shape());
  int64_t count = 1;
  for (int d = 0; d < x.dim() - 3; ++d) count *= x.size(d);
  return {count, x.size(-3), x.size(-2), x.size(-1)};
}

// Calls f(plane, image) for every (image, channel) plane, split over threads by the plane's size.
template <class F>
void for_each_plane(const Images& im, int64_t cost_per_plane, F f) {
  cpu::parallel_for(im.count * im.channels, cost_per_plane, 1, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) f(q, q / im.channels);
  });
}

}  // namespace detail

// (x - mean[c]) / std[c] for channel c, in float (torchvision's Normalize). mean and std have one value per
// channel, or one value for all.
class Normalize {
 public:
  Normalize(const std::vector<double>& mean, const std::vector<double>& std) {
    check(!mean.empty() && mean.size() == std.size(), "Normalize: expected as many means as stds (at least one), got ",
          mean.size(), " and ", std.size());
    for (const double s : std)
      check(float(s) != 0, "Normalize: std must be nonzero in float, got ", s);
    const int64_t c = int64_t(mean.size());
    mean_ = empty<float>({c, 1, 1});
    std_ = empty<float>({c, 1, 1});
    std::transform(mean.begin(), mean.end(), mean_.data_ptr(), [](double v) { return float(v); });
    std::transform(std.begin(), std.end(), std_.data_ptr(), [](double v) { return float(v); });
  }

  Tensor<float> operator()(const Tensor<float>& x, Generator&) const {
    const detail::Images im = detail::images_of(x, "Normalize");
    check<ShapeError>(mean_.size(0) == 1 || mean_.size(0) == im.channels, "Normalize: ", mean_.size(0),
                      " channel values for images with ", im.channels, " channels (shape ", x.shape(), ")");
    return Tensor<float>((x - mean_) / std_);  // {C, 1, 1} broadcasts over (..., C, H, W)
  }

 private:
  Tensor<float> mean_, std_;
};

// A random size[0] x size[1] window of each image padded with `padding` zeros on every side (torchvision's
// RandomCrop with constant padding). The window's top-left corner in the padded image is uniform over the
// positions where it fits: top in [0, H + 2 padding - size[0]], left in [0, W + 2 padding - size[1]].
// RandomCrop(28, 4) crops 28 x 28 after padding by 4; RandomCrop({24, 20}, 0) crops 24 x 20 (a braced size needs
// the padding too: RandomCrop({24, 20}) alone could also mean RandomCrop(24, 20)).
class RandomCrop {
 public:
  explicit RandomCrop(std::array<int64_t, 2> size, int64_t padding = 0) : size_(size), padding_(padding) {
    check(size[0] > 0 && size[1] > 0 && padding >= 0, "RandomCrop: expected a positive size and padding >= 0, got [",
          size[0], ", ", size[1], "] and ", padding);
  }
  explicit RandomCrop(int64_t size, int64_t padding = 0) : RandomCrop({size, size}, padding) {}

  Tensor<float> operator()(const Tensor<float>& x, Generator& gen) const {
    const detail::Images im = detail::images_of(x, "RandomCrop");
    const int64_t p = padding_, h = size_[0], w = size_[1];
    check<ShapeError>(h <= im.h + 2 * p && w <= im.w + 2 * p, "RandomCrop: crop [", h, ", ", w,
                      "] is larger than the padded image [", im.h + 2 * p, ", ", im.w + 2 * p, "] (padding ", p,
                      ")");
    std::vector<int64_t> tops(size_t(im.count)), lefts(size_t(im.count));
    fill_randint(gen, tops.data(), im.count, 0, im.h + 2 * p - h + 1);
    fill_randint(gen, lefts.data(), im.count, 0, im.w + 2 * p - w + 1);

    const Tensor<float> in = x.contiguous();
    Shape shape = x.shape();
    shape[shape.size() - 2] = h;
    shape[shape.size() - 1] = w;
    Tensor<float> out = empty<float>(shape);
    const float* src = in.data_ptr();
    float* dst = out.data_ptr();
    detail::for_each_plane(im, h * w, [&](int64_t q, int64_t image) {
      const float* plane = src + q * im.h * im.w;
      // In unpadded coordinates the window starts at (top - p, left - p); columns [j0, j1) of it are inside.
      const int64_t top = tops[size_t(image)] - p, left = lefts[size_t(image)] - p;
      const int64_t j0 = std::clamp<int64_t>(-left, 0, w), j1 = std::clamp<int64_t>(im.w - left, j0, w);
      for (int64_t i = 0; i < h; ++i) {
        float* row = dst + (q * h + i) * w;
        const int64_t r = top + i;
        if (r < 0 || r >= im.h) {
          std::fill(row, row + w, 0.0f);
          continue;
        }
        std::fill(row, row + j0, 0.0f);
        std::copy(plane + r * im.w + left + j0, plane + r * im.w + left + j1, row + j0);
        std::fill(row + j1, row + w, 0.0f);
      }
    });
    return out;
  }

 private:
  std::array<int64_t, 2> size_;
  int64_t padding_;
};

// Each image reversed along W with probability p (torchvision's RandomHorizontalFlip), drawn per image.
class RandomHorizontalFlip {
 public:
  explicit RandomHorizontalFlip(double p = 0.5) : p_(p) {
    check(p >= 0 && p <= 1, "RandomHorizontalFlip: expected 0 <= p <= 1, got ", p);
  }

  Tensor<float> operator()(const Tensor<float>& x, Generator& gen) const {
    const detail::Images im = detail::images_of(x, "RandomHorizontalFlip");
    std::vector<uint8_t> flip(size_t(im.count));
    fill_bernoulli(gen, flip.data(), im.count, p_);

    const Tensor<float> in = x.contiguous();
    Tensor<float> out = empty<float>(x.shape());
    const float* src = in.data_ptr();
    float* dst = out.data_ptr();
    const int64_t area = im.h * im.w;
    detail::for_each_plane(im, area, [&](int64_t q, int64_t image) {
      const float* s = src + q * area;
      float* d = dst + q * area;
      if (!flip[size_t(image)]) {
        std::copy(s, s + area, d);
        return;
      }
      for (int64_t i = 0; i < im.h; ++i) std::reverse_copy(s + i * im.w, s + (i + 1) * im.w, d + i * im.w);
    });
    return out;
  }

 private:
  double p_;
};

// The transforms applied in order, all drawing from the same generator (torchvision's Compose).
class Compose {
 public:
  explicit Compose(std::vector<Transform> transforms) : transforms_(std::move(transforms)) {
    for (const Transform& t : transforms_) check(bool(t), "Compose: a transform is empty");
  }

  Tensor<float> operator()(const Tensor<float>& x, Generator& gen) const {
    Tensor<float> y = x;
    for (const Transform& t : transforms_) y = t(y, gen);
    return y;
  }

 private:
  std::vector<Transform> transforms_;
};

}  // namespace kiln::data::transforms

#pragma once
// A decoded grayscale image, the errors of decoding one, the size limit every decoder enforces before it
// allocates, and area resampling to the model's input size.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace serve {

// Pixels in [0, 1], row-major; 0 is black (Fashion-MNIST draws light garments on black).
struct GrayImage {
  int64_t width = 0, height = 0;
  std::vector<float> pixels;
};

// The body is not a valid image of its format (truncated, corrupt, too large): HTTP 400.
struct ImageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The body is not in a format the server reads: HTTP 415.
struct UnsupportedImageFormat : ImageError {
  using ImageError::ImageError;
};

struct ImageLimits {
  // Largest width and height accepted; checked against the declared size before any pixel buffer exists,
  // so a small file declaring a huge image (a decompression bomb) costs nothing.
  int64_t max_side = 2048;
};

inline void check_declared_size(const char* format, int64_t width, int64_t height, const ImageLimits& limits) {
  if (width < 1 || height < 1)
    throw ImageError(std::string(format) + ": declares an empty image (" + std::to_string(width) + "x" +
                     std::to_string(height) + ")");
  if (width > limits.max_side || height > limits.max_side)
    throw ImageError(std::string(format) + ": declares " + std::to_string(width) + "x" + std::to_string(height) +
                     " pixels; the limit is " + std::to_string(limits.max_side) + " on each side");
}

namespace detail {

// Output pixel o of an axis resampled from `in` to `out` pixels covers [o, o + 1) * in / out of the input;
// it averages the input pixels under that interval, each weighted by how much of it is covered.
struct AreaTaps {
  int64_t first = 0;  // the first input pixel under the interval
  std::vector<float> weights;
};

inline std::vector<AreaTaps> area_taps(int64_t in, int64_t out) {
  const double scale = double(in) / double(out);
  std::vector<AreaTaps> taps(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const double lo = double(o) * scale, hi = double(o + 1) * scale;
    const int64_t first = std::min(int64_t(std::floor(lo)), in - 1);
    const int64_t last = std::clamp(int64_t(std::ceil(hi)) - 1, first, in - 1);
    taps[size_t(o)].first = first;
    for (int64_t i = first; i <= last; ++i)
      taps[size_t(o)].weights.push_back(float((std::min(hi, double(i + 1)) - std::max(lo, double(i))) / scale));
  }
  return taps;
}

}  // namespace detail

// Area resampling (a box filter: each output pixel is the mean of the input area it covers), one axis at
// a time. Downscaling by an integer factor averages whole blocks; upscaling blends neighbours linearly.
inline GrayImage resize_area(const GrayImage& in, int64_t width, int64_t height) {
  if (in.width == width && in.height == height) return in;
  const std::vector<detail::AreaTaps> across = detail::area_taps(in.width, width);
  const std::vector<detail::AreaTaps> down = detail::area_taps(in.height, height);
  std::vector<float> rows(size_t(in.height * width));  // resampled across, not yet down
  for (int64_t y = 0; y < in.height; ++y)
    for (int64_t x = 0; x < width; ++x) {
      const detail::AreaTaps& t = across[size_t(x)];
      float sum = 0;
      for (size_t k = 0; k < t.weights.size(); ++k) sum += t.weights[k] * in.pixels[size_t(y * in.width + t.first) + k];
      rows[size_t(y * width + x)] = sum;
    }
  GrayImage out{width, height, std::vector<float>(size_t(width * height))};
  for (int64_t y = 0; y < height; ++y) {
    const detail::AreaTaps& t = down[size_t(y)];
    for (int64_t x = 0; x < width; ++x) {
      float sum = 0;
      for (size_t k = 0; k < t.weights.size(); ++k) sum += t.weights[k] * rows[(size_t(t.first) + k) * size_t(width) + size_t(x)];
      out.pixels[size_t(y * width + x)] = sum;
    }
  }
  return out;
}

}  // namespace serve

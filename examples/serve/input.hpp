#pragma once
// From a request body to the model's input: the image decoded (PNG or binary PGM, told apart by their
// first bytes), resampled to 28x28 when it has another size, and normalized as the training data was.
#include <string_view>
#include <vector>

#include "../fashion_mnist/model.hpp"
#include "image.hpp"
#include "pgm.hpp"
#include "png.hpp"

namespace serve {

inline GrayImage decode_image(std::string_view bytes, const ImageLimits& limits) {
  if (bytes.empty()) throw ImageError("the request body is empty; send a PNG or binary PGM (P5) image");
  if (looks_like_png(bytes)) return decode_png(bytes, limits);
  if (looks_like_pgm(bytes)) return decode_pgm(bytes, limits);
  throw UnsupportedImageFormat("the request body is neither a PNG nor a binary PGM (P5) image");
}

// kImageSide * kImageSide floats: (pixel - mean) / std, as examples/fashion_mnist normalizes its data.
inline std::vector<float> model_input(const GrayImage& image) {
  using fashion_mnist::kImageSide, fashion_mnist::kMean, fashion_mnist::kStd;
  std::vector<float> input = resize_area(image, kImageSide, kImageSide).pixels;
  for (float& v : input) v = (v - kMean) / kStd;
  return input;
}

}  // namespace serve

// kiln::data::transforms against direct loops: Normalize's values, RandomCrop as a window of the zero-padded
// input at an offset in range, RandomHorizontalFlip as a reversal along W (p = 0 and 1 too), Compose's order.
#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "kiln/data.hpp"
#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_data_transforms {

using namespace kiln;
using namespace kiln::data::transforms;

namespace {

// Element [n][c][i][j] of a contiguous (N, C, H, W) tensor.
float at(const Tensor<float>& t, int64_t n, int64_t c, int64_t i, int64_t j) {
  return t.data_ptr()[((n * t.size(1) + c) * t.size(2) + i) * t.size(3) + j];
}

bool same_bits(const Tensor<float>& a, const Tensor<float>& b) {
  if (!(a.shape() == b.shape())) return false;
  const Tensor<float> ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(a.numel()) * sizeof(float)) == 0;
}

// Whether image n of `out` is image n of `x` reversed along W (or, with reversed = false, equal to it).
bool matches(const Tensor<float>& out, const Tensor<float>& x, int64_t n, bool reversed) {
  const int64_t w = x.size(3);
  for (int64_t c = 0; c < x.size(1); ++c)
    for (int64_t i = 0; i < x.size(2); ++i)
      for (int64_t j = 0; j < w; ++j)
        if (at(out, n, c, i, j) != at(x, n, c, i, reversed ? w - 1 - j : j)) return false;
  return true;
}

// The offsets (top, left) at which image n of `out` is a window of image n of `x` padded with p zeros.
std::vector<std::pair<int64_t, int64_t>> window_offsets(const Tensor<float>& out, const Tensor<float>& x, int64_t n,
                                                        int64_t p) {
  const int64_t h = out.size(2), w = out.size(3), ph = x.size(2) + 2 * p, pw = x.size(3) + 2 * p;
  const auto padded = [&](int64_t c, int64_t r, int64_t q) {
    r -= p;
    q -= p;
    return r < 0 || r >= x.size(2) || q < 0 || q >= x.size(3) ? 0.0f : at(x, n, c, r, q);
  };
  std::vector<std::pair<int64_t, int64_t>> found;
  for (int64_t top = 0; top + h <= ph; ++top)
    for (int64_t left = 0; left + w <= pw; ++left) {
      bool ok = true;
      for (int64_t c = 0; c < x.size(1) && ok; ++c)
        for (int64_t i = 0; i < h && ok; ++i)
          for (int64_t j = 0; j < w && ok; ++j) ok = at(out, n, c, i, j) == padded(c, top + i, left + j);
      if (ok) found.emplace_back(top, left);
    }
  return found;
}

}  // namespace

TEST_CASE("Normalize: (x - mean[c]) / std[c] in float per channel, or one value for all; errors") {
  Generator gen(1);
  const Tensor<float> x = rand<float>({2, 3, 4, 5}, &gen);
  const std::vector<double> mean{0.1, 0.2, 0.3}, std{0.5, 2, 4};
  const Tensor<float> y = Normalize(mean, std)(x, gen);
  REQUIRE(y.shape() == x.shape());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 5; ++j)
          CHECK(at(y, n, c, i, j) == (at(x, n, c, i, j) - float(mean[size_t(c)])) / float(std[size_t(c)]));
  // One image (C, H, W) gives the batch's first image; a single value applies to every channel.
  CHECK(same_bits(Normalize(mean, std)(x[0], gen), y[0]));
  CHECK(at(Normalize({0.5}, {0.25})(x, gen), 1, 2, 3, 4) == (at(x, 1, 2, 3, 4) - 0.5f) / 0.25f);

  CHECK_THROWS_AS(Normalize({0.1, 0.2}, {1}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(Normalize({0.1}, {0.0}), "Normalize: std must be nonzero in float, got 0",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Normalize({0, 0}, {1, 1})(x, gen),
                       "Normalize: 2 channel values for images with 3 channels (shape [2, 3, 4, 5])", ShapeError);
  CHECK_THROWS_WITH_AS(Normalize({0}, {1})(zeros<float>({4, 5}), gen),
                       "Normalize: expected images of shape (..., C, H, W), got shape [4, 5]", ShapeError);
}

TEST_CASE("RandomCrop: each image is a window of its zero-padded self, at a random offset within range") {
  Generator gen(2);
  const Tensor<float> x = rand<float>({40, 2, 5, 7}, &gen) + 1.0f;  // no zeros, so padding is recognizable
  const Tensor<float> y = RandomCrop({4, 6}, 2)(x, gen);
  REQUIRE(y.shape() == Shape{40, 2, 4, 6});
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t n = 0; n < 40; ++n) {
    const auto found = window_offsets(y, x, n, 2);
    REQUIRE(found.size() == 1);
    CHECK(found[0].first <= 5);  // top in [0, 5 + 4 - 4], left in [0, 7 + 4 - 6]
    CHECK(found[0].second <= 5);
    offsets.insert(found[0]);
  }
  CHECK(offsets.size() > 20);  // each image draws its own offset (36 possible)

  // Every offset occurs; the same generator state gives the same crops.
  const Tensor<float> small = rand<float>({300, 1, 3, 3}, &gen) + 1.0f;
  Generator a(9), b(9);
  const Tensor<float> cropped = RandomCrop(3, 1)(small, a);
  CHECK(same_bits(cropped, RandomCrop(3, 1)(small, b)));
  std::set<std::pair<int64_t, int64_t>> all;
  for (int64_t n = 0; n < 300; ++n) all.insert(window_offsets(cropped, small, n, 1).at(0));
  CHECK(all.size() == 9);

  // The full size without padding is the identity; one image (C, H, W) works; a non-contiguous input too.
  CHECK(same_bits(RandomCrop({5, 7}, 0)(x, gen), x));
  CHECK(RandomCrop(3, 1)(x[0], gen).shape() == Shape{2, 3, 3});
  const Tensor<float> xt = x.transpose(2, 3);
  const Tensor<float> yt = RandomCrop(4)(xt, gen);
  const Tensor<float> xt_copy = xt.contiguous();
  for (int64_t n = 0; n < 40; ++n) CHECK(window_offsets(yt, xt_copy, n, 0).size() == 1);

  CHECK_THROWS_WITH_AS(RandomCrop(10, 1)(x, gen),
                       "RandomCrop: crop [10, 10] is larger than the padded image [7, 9] (padding 1)", ShapeError);
  CHECK_THROWS_AS(RandomCrop(0), std::invalid_argument);
  CHECK_THROWS_AS(RandomCrop(3, -1), std::invalid_argument);
}

TEST_CASE("RandomHorizontalFlip: each image as is or reversed along W, all channels alike; p = 0 and p = 1") {
  Generator gen(3);
  const Tensor<float> x = rand<float>({400, 2, 3, 4}, &gen);
  const Tensor<float> y = RandomHorizontalFlip()(x, gen);
  int64_t flipped = 0;
  for (int64_t n = 0; n < 400; ++n) {
    const bool reversed = matches(y, x, n, true);
    CHECK(reversed != matches(y, x, n, false));
    flipped += reversed;
  }
  CHECK(flipped > 150);
  CHECK(flipped < 250);

  const Tensor<float> all = RandomHorizontalFlip(1)(x, gen);
  const Tensor<float> none = RandomHorizontalFlip(0)(x, gen);
  for (int64_t n = 0; n < 400; ++n) CHECK(matches(all, x, n, true));
  CHECK(same_bits(none, x));
  // A non-contiguous input (W is the transposed dim) and a single image.
  const Tensor<float> xt = x.transpose(2, 3);
  const Tensor<float> xt_copy = xt.contiguous();
  const Tensor<float> yt = RandomHorizontalFlip(1)(xt, gen);
  for (int64_t n = 0; n < 400; ++n) CHECK(matches(yt, xt_copy, n, true));
  CHECK(same_bits(RandomHorizontalFlip(1)(x[7], gen), all[7]));

  CHECK_THROWS_AS(RandomHorizontalFlip(1.5), std::invalid_argument);
}

TEST_CASE("Compose: the transforms in order, drawing from one generator") {
  Generator gen(4);
  const Tensor<float> x = rand<float>({8, 1, 6, 6}, &gen);
  const RandomCrop crop(4, 1);
  const RandomHorizontalFlip flip;
  const Normalize normalize({0.5}, {0.5});
  Generator a(10), b(10);
  const Tensor<float> composed = Compose({crop, flip, normalize})(x, a);
  CHECK(same_bits(composed, normalize(flip(crop(x, b), b), b)));
  // Order matters: normalizing first leaves the crop's zero padding as is.
  Generator c(10), d(10);
  const Tensor<float> reordered = Compose({normalize, crop, flip})(x, c);
  CHECK(same_bits(reordered, flip(crop(normalize(x, d), d), d)));
  CHECK(!same_bits(reordered, composed));

  CHECK_THROWS_WITH_AS(Compose({crop, Transform()}), "Compose: a transform is empty", std::invalid_argument);
}

}  // namespace test_data_transforms

// F::pad, F::interpolate, nn::Upsample (nn/resample.hpp), F::normalize, F::cosine_similarity,
// F::pairwise_distance (nn/distance.hpp) against PyTorch: tests/fixtures/nn/functional_torch.safetensors (written
// by scripts/functional_reference.py with torch 2.15.0) holds each case's output and the gradients of a weighted
// sum, computed by PyTorch in float64 and in float32. kiln in double must give the float64 values to rounding; in
// float, the float32 ones (the same source pixels picked: the index arithmetic is done in float as PyTorch's).
// Also F::one_hot, printing and the errors.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"

#include "torch_fixture.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_resample {

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

Tensor<double> entry(const std::string& key) { return test::torch_entry("functional_torch.safetensors", key); }

template <class T>
using Function = std::function<Tensor<T>(const std::vector<Tensor<T>>&)>;

// Case `name` on the fixture's inputs as T: the output and every input's gradient, against PyTorch's in float64
// (T = double) or float32 (T = float).
template <class T>
void check_case(const std::string& name, const std::vector<std::string>& inputs, const Function<T>& f) {
  const std::string suffix = std::is_same_v<T, double> ? "" : "32";
  const double tol = std::is_same_v<T, double> ? 1e-12 : 2e-6;
  std::vector<Tensor<T>> args;
  for (const std::string& input : inputs) args.push_back(entry(input).to<T>().requires_grad_());
  const Tensor<T> y = f(args);
  test::expect_close_to_torch(y, entry(name + ".output" + suffix), tol, name + ": the output");
  sum(y * entry(name + ".w").to<T>()).backward();
  for (size_t i = 0; i < inputs.size(); ++i)
    test::expect_close_to_torch(args[i].grad(), entry(name + ".grad" + suffix + "." + inputs[i]), tol,
                 name + ": the gradient of " + inputs[i]);
}

template <class T>
void check_all() {
  using Args = const std::vector<Tensor<T>>&;
  const auto pad = [](std::vector<int64_t> amounts, std::string mode = "constant", double value = 0) {
    return Function<T>([=](Args x) { return F::pad(x[0], amounts, mode, value); });
  };
  const auto interpolate = [](F::InterpolateOptions o) {
    return Function<T>([=](Args x) { return F::interpolate(x[0], o); });
  };
  using O = F::InterpolateOptions;
  const std::vector<std::tuple<std::string, std::vector<std::string>, Function<T>>> cases = {
      {"pad3_constant", {"x3"}, pad({2, 1}, "constant", 0.5)},
      {"pad3_crop", {"x3"}, pad({-1, 2})},
      {"pad3_reflect", {"x3"}, pad({2, 3}, "reflect")},
      {"pad3_replicate", {"x3"}, pad({3, 1}, "replicate")},
      {"pad3_circular", {"x3"}, pad({2, 4}, "circular")},
      {"pad4_constant", {"x4"}, pad({1, 2, 0, 1}, "constant", -2)},
      {"pad4_crop", {"x4"}, pad({-1, 1, -2, 0})},
      {"pad4_reflect", {"x4"}, pad({1, 2, 3, 1}, "reflect")},
      {"pad4_replicate", {"x4"}, pad({2, 0, 1, 3}, "replicate")},
      {"pad4_circular", {"x4"}, pad({1, 1, 2, 3}, "circular")},
      {"nearest_size", {"x4"}, interpolate(O().size({8, 11}))},
      {"nearest_scale2", {"x4"}, interpolate(O().scale_factor({2}))},
      {"nearest_down", {"x4"}, interpolate(O().scale_factor({0.5}))},
      {"nearest_scale1.7", {"x4"}, interpolate(O().scale_factor({1.7}))},
      {"bilinear_size", {"x4"}, interpolate(O().size({8, 11}).mode("bilinear"))},
      {"bilinear_size_corners", {"x4"}, interpolate(O().size({8, 11}).mode("bilinear").align_corners(true))},
      {"bilinear_scale", {"x4"}, interpolate(O().scale_factor({2, 1.5}).mode("bilinear"))},
      {"bilinear_down", {"x4"}, interpolate(O().size({3, 4}).mode("bilinear"))},
      {"bilinear_down_corners", {"x4"}, interpolate(O().size({3, 4}).mode("bilinear").align_corners(true))},
      {"bilinear_scale0.6", {"x4"}, interpolate(O().scale_factor({0.6}).mode("bilinear"))},
      {"linear_size", {"x3"}, interpolate(O().size({10}).mode("linear"))},
      {"linear_size_corners", {"x3"}, interpolate(O().size({10}).mode("linear").align_corners(true))},
      {"linear_scale2.5", {"x3"}, interpolate(O().scale_factor({2.5}).mode("linear"))},
      {"nearest1d_size", {"x3"}, interpolate(O().size({4}))},
      {"trilinear_size", {"x5"}, interpolate(O().size({5, 6, 7}).mode("trilinear"))},
      {"nearest3d_scale2", {"x5"}, interpolate(O().scale_factor({2}))},
      {"normalize", {"a"}, [](Args x) { return F::normalize(x[0]); }},
      {"normalize_p1_dim0", {"a"}, [](Args x) { return F::normalize(x[0], 1, 0); }},
      {"cosine_similarity", {"a", "b"}, [](Args x) { return F::cosine_similarity(x[0], x[1]); }},
      {"cosine_similarity_broadcast", {"a", "b1"}, [](Args x) { return F::cosine_similarity(x[0], x[1], 1); }},
      {"pairwise_distance", {"a", "b"}, [](Args x) { return F::pairwise_distance(x[0], x[1]); }},
      {"pairwise_distance_p1_keepdim", {"a", "b"},
       [](Args x) { return F::pairwise_distance(x[0], x[1], 1, 1e-6, true); }},
  };
  for (const auto& [name, inputs, f] : cases) check_case<T>(name, inputs, f);
}

}  // namespace

TEST_CASE("pad, interpolate, normalize, cosine_similarity, pairwise_distance in float64 equal PyTorch's") {
  check_all<double>();
}

TEST_CASE("the same in float equal PyTorch's float32, the same source pixels picked") { check_all<float>(); }

TEST_CASE("nn::Upsample is interpolate as a module; printing") {
  const Tensor<float> x = entry("x4").to<float>();
  nn::Upsample up(nn::UpsampleOptions().scale_factor({2, 1.5}).mode("bilinear"));
  test::expect_close_to_torch(up(x), entry("bilinear_scale.output32"), 2e-6, "Upsample");
  std::ostringstream out;
  up->pretty_print(out);
  CHECK(out.str() == "Upsample(scale_factor=(2, 1.5), mode='bilinear')");
  std::ostringstream sized;
  nn::Upsample(nn::UpsampleOptions().size({4, 4}))->pretty_print(sized);
  CHECK(sized.str() == "Upsample(size=(4, 4), mode='nearest')");
}

TEST_CASE("cosine_similarity broadcasts before the norms; interpolate copies a dim whose size does not change") {
  // [[1]] against [[1, 1]] along dim 1: [[1, 1]] against [[1, 1]], cosine 1 (not sqrt(2))
  CHECK(F::cosine_similarity(tensor<double>({{1.0}}), tensor<double>({{1.0, 1.0}})).item() ==
        doctest::Approx(1.0).epsilon(1e-12));
  CHECK(F::cosine_similarity(tensor<double>({3.0, 4.0, 0.0}).reshape({1, 3}), randn<double>({2, 3})).shape() ==
        Shape{2});
  // scale 1.2 of a length 4 gives 4 again (floor(4.8)): PyTorch copies it, no interpolation
  const Tensor<float> ramp = arange<float>(4).reshape({1, 1, 4});
  CHECK(F::interpolate(ramp, F::InterpolateOptions().scale_factor({1.2}).mode("linear")).to_vector() ==
        ramp.to_vector());
  // nearest indices in float also for double (2 -> 98: PyTorch gives 49 ones)
  const Tensor<double> two = tensor<double>({0.0, 1.0}).reshape({1, 1, 2});
  CHECK(sum(F::interpolate(two, F::InterpolateOptions().size({98}))).item() == 49);
}

TEST_CASE("one_hot: a 1 at each index, the classes inferred or given; indices out of range refused") {
  const Tensor<int64_t> labels = tensor<int64_t>({{2, 0}, {1, 2}});
  const Tensor<int64_t> inferred = F::one_hot(labels);
  CHECK(inferred.shape() == Shape{2, 2, 3});
  CHECK(inferred.to_vector() == std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(F::one_hot(tensor<int64_t>({1}), 4).to_vector() == std::vector<int64_t>{0, 1, 0, 0});
  CHECK(F::one_hot(empty<int64_t>({0}), 5).shape() == Shape{0, 5});
  CHECK_THROWS_WITH_AS(F::one_hot(labels, 2), doctest::Contains("one_hot: index 2 is out of range for 2 classes"),
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(F::one_hot(tensor<int64_t>({-1})), doctest::Contains("one_hot: index -1 is negative"),
                       std::out_of_range);
  CHECK_THROWS_AS(F::one_hot(empty<int64_t>({0})), std::invalid_argument);
}

TEST_CASE("pad and interpolate errors name the op, the shapes and what is wrong") {
  const Tensor<float> x = randn<float>({1, 2, 3, 4});
  CHECK_THROWS_WITH_AS(F::pad(x, {1, 1, 1}), doctest::Contains("pad: 3 amounts for input of shape [1, 2, 3, 4]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(F::pad(x, {1, 1}, "mirror"), doctest::Contains("pad: mode must be constant, reflect"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(F::pad(x, {4, 0}, "reflect"),
                       doctest::Contains("pad: reflect padding 4 and 0 of dim 3 of size 4 must be at most 3"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::pad(x, {0, 0, 4, 0}, "circular"),
                       doctest::Contains("pad: circular padding 4 and 0 of dim 2 of size 3 must be at most 3"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::pad(x, {-3, -2}), doctest::Contains("leaves a negative size"), ShapeError);
  CHECK_THROWS_WITH_AS(F::pad(x, {1, 1}, "reflect", 1.0), doctest::Contains("pad: mode \"reflect\" takes no value"),
                       std::invalid_argument);
  CHECK(F::pad(x, {0, 0, 5, 5}, "replicate").shape() == Shape{1, 2, 13, 4});  // (replicate has no limit)

  using O = F::InterpolateOptions;
  CHECK_THROWS_WITH_AS(F::interpolate(x, O()), doctest::Contains("give either size or scale_factor, not neither"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(F::interpolate(x, O().size({2, 2}).scale_factor({2})), doctest::Contains("not both"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(F::interpolate(x, O().size({2, 2}).mode("linear")),
                       doctest::Contains("mode \"linear\" needs a 3-d input, got shape [1, 2, 3, 4]"), ShapeError);
  CHECK_THROWS_WITH_AS(F::interpolate(x, O().size({2, 2}).mode("bicubic")),
                       doctest::Contains("mode must be nearest, linear, bilinear or trilinear"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(F::interpolate(x, O().size({2, 2, 2})),
                       doctest::Contains("3 sizes or scale factors for 2 spatial dims"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(F::interpolate(x, O().scale_factor({0.1})), doctest::Contains("output size 0 of dim 2"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::interpolate(x, O().size({2, 2}).align_corners(true)),
                       doctest::Contains("align_corners applies to the linear modes only"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(F::interpolate(randn<float>({4, 4}), O().size({2})), doctest::Contains("must be 3-, 4- or 5-d"),
                       ShapeError);
}

}  // namespace test_nn_resample

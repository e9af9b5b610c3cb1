// GradScaler: an overflowing (or NaN) gradient skips the step and backs the scale off; good steps equal the
// unscaled optimizer's exactly (power-of-two scales); growth after growth_interval good steps; unscale_ before
// clipping; state_dict with torch's names; a disabled scaler changes nothing.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.hpp"
#include "kiln/optim.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_optim_grad_scaler {

using namespace kiln;

namespace {
Tensor<float> leaf(std::vector<float> v) {
  Tensor<float> t = tensor(v);
  t.requires_grad_();
  return t;
}
}  // namespace

TEST_CASE("GradScaler: an overflowing gradient skips the step and the scale backs off; good steps are the optimizer's") {
  Tensor<float> w = leaf({1.0f, -2.0f, 3.0f});
  optim::SGD<float> opt({w}, optim::SGDOptions(0.1));
  GradScaler scaler(GradScalerOptions{.init_scale = 65536.0, .growth_interval = 3});
  // Overflow: d(sum(w * 1e35)) / dw * 65536 = 6.6e39, past float's 3.4e38.
  opt.zero_grad();
  scaler.scale(sum(w * 1e35f)).backward();
  CHECK(std::isinf(w.grad().to_vector()[0]));
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(w.to_vector() == std::vector<float>{1.0f, -2.0f, 3.0f});  // untouched
  CHECK(scaler.get_scale() == 32768.0);
  // A NaN gradient is skipped too.
  opt.zero_grad();
  scaler.scale(sum(w * std::numeric_limits<float>::quiet_NaN())).backward();
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_scale() == 16384.0);
  // Good steps: the gradient of sum(w^2) / 2 is w; the step is SGD's on the unscaled gradient, bit for bit.
  Tensor<float> ref = tensor<float>({1.0f, -2.0f, 3.0f});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    scaler.scale(Tensor<float>(sum(w * w) * 0.5f)).backward();
    CHECK(w.grad().to_vector() == Tensor<float>(w.detach() * 16384.0f).to_vector());  // scaled
    CHECK(scaler.step(opt));
    scaler.update();
    ref = Tensor<float>(ref - ref * 0.1f);
    CHECK(w.to_vector() == ref.to_vector());
  }
  CHECK(scaler.get_scale() == 32768.0);  // grown after growth_interval = 3 good steps
}

TEST_CASE("GradScaler: unscale_ before clipping, once per iteration; state_dict; disabled") {
  Tensor<float> w = leaf({3.0f, 4.0f});
  optim::SGD<float> opt({w}, optim::SGDOptions(1.0));
  GradScaler scaler;
  scaler.scale(sum(w * w)).backward();  // gradient 2 w = [6, 8] times 65536
  scaler.unscale_(opt);
  CHECK(w.grad().to_vector() == std::vector<float>{6.0f, 8.0f});
  CHECK(optim::clip_grad_norm_(std::vector<Tensor<float>>{w}, 5.0) == doctest::Approx(10.0));
  CHECK_THROWS_AS(scaler.unscale_(opt), std::logic_error);
  CHECK(scaler.step(opt));  // does not unscale again
  const std::vector<float> after_step = w.to_vector();
  // A second step before update() is an error, as torch's, and leaves the parameters alone.
  CHECK_THROWS_WITH_AS(scaler.step(opt), "GradScaler::step: already called on this optimizer since the last update()",
                       std::logic_error);
  CHECK(w.to_vector() == after_step);
  scaler.update();
  CHECK(w.to_vector()[0] == doctest::Approx(3.0 - 3.0));  // the clipped gradient [3, 4]
  CHECK(w.to_vector()[1] == doctest::Approx(4.0 - 4.0));
  CHECK_THROWS_AS(scaler.update(), std::logic_error);  // nothing since the last update

  const auto state = scaler.state_dict();
  CHECK(state.at("scale").as<double>().item() == 65536.0);
  CHECK(state.at("_growth_tracker").as<int64_t>().item() == 1);
  GradScaler other(GradScalerOptions{.init_scale = 2.0});
  other.load_state_dict(state);
  CHECK(other.get_scale() == 65536.0);
  CHECK(other.state_dict().at("_growth_tracker").as<int64_t>().item() == 1);
  CHECK_THROWS_AS(GradScaler(GradScalerOptions{.backoff_factor = 1.5}), std::invalid_argument);

  // Growth past float's range keeps the scale (torch keeps it in float32 and does the same).
  GradScaler near_max(GradScalerOptions{.init_scale = 0x1p127, .growth_interval = 1});
  Tensor<float> u = leaf({1.0f});
  optim::SGD<float> o3({u}, optim::SGDOptions(0.5));
  near_max.scale(sum(u * 0.0f)).backward();
  CHECK(near_max.step(o3));
  near_max.update();
  CHECK(near_max.get_scale() == 0x1p127);

  GradScaler off(GradScalerOptions{.enabled = false});
  Tensor<float> v = leaf({1.0f});
  optim::SGD<float> o2({v}, optim::SGDOptions(0.5));
  off.scale(sum(v * 1e38f * 10.0f)).backward();  // inf gradient, and still stepped: nothing is checked
  CHECK(off.step(o2));
  off.update();
  CHECK(off.get_scale() == 1.0);
  CHECK(std::isinf(v.to_vector()[0]));
}

}  // namespace test_optim_grad_scaler

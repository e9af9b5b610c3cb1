#pragma once
// kiln::GradScaler, as torch.amp.GradScaler: loss scaling for training with 16-bit gradients, whose small
// values would flush to zero unscaled.
//
//   kiln::GradScaler scaler;                      // init_scale 2^16, growth 2, backoff 0.5, interval 2000
//   scaler.scale(loss).backward();                // gradients of loss * scale
//   scaler.unscale_(opt);                         // optional: divide the gradients back (e.g. before clipping)
//   scaler.step(opt);                             // unscale if not done; skip the step if any is Inf/NaN
//   scaler.update();                              // backoff after a skipped step, growth after growth_interval good ones
//
// state_dict() has torch's names: "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker".
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kiln/optim/optimizer.hpp"
#include "kiln/tensor/reduce.hpp"

namespace kiln {

struct GradScalerOptions {
  double init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions o = {}) : o_(o), scale_(o.init_scale) {
    check<std::invalid_argument>(o.init_scale > 0 && o.growth_factor > 1 && o.backoff_factor > 0 &&
                                     o.backoff_factor < 1 && o.growth_interval >= 1,
                                 "GradScaler: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and "
                                 "growth_interval >= 1, got ", o.init_scale, ", ", o.growth_factor, ", ",
                                 o.backoff_factor, ", ", o.growth_interval);
  }

  // loss * scale (the loss itself when disabled).
  template <Dtype T>
  Tensor<T> scale(const Tensor<T>& loss) const {
    if (!o_.enabled) return loss;
    return Tensor<T>(loss * compute_t<T>(scale_));
  }

  // Divides the optimizer's gradients by the scale in place and records whether any is Inf or NaN. Once per
  // optimizer per iteration (as torch: a second call before update() is an error).
  template <class Opt>
  void unscale_(Opt& optimizer) {
    if (!o_.enabled) return;
    Record& r = records_[&optimizer];
    check<std::logic_error>(!r.unscaled, "GradScaler::unscale_: already called on this optimizer since the last update()");
    NoGradGuard no_grad;
    const double inv = 1.0 / scale_;
    // Inf * 0 and NaN * 0 are NaN: sum(g * 0) of every gradient, added up where the gradients are (one 0-d double
    // per device, so a GPU is read once per step, not once per parameter), is NaN when any element is not finite.
    std::vector<Tensor<double>> probes;
    for (auto& group : optimizer.param_groups())
      for (auto& p : group.params) {
        auto g = p.grad();
        if (!g.defined()) continue;
        using C = compute_t<typename std::remove_cvref_t<decltype(g)>::value_type>;
        const Tensor<double> probe = sum(g * C(0)).template to<double>();
        auto same_device = std::find_if(probes.begin(), probes.end(), [&](const auto& t) { return t.device() == g.device(); });
        if (same_device == probes.end()) probes.push_back(probe);
        else *same_device = Tensor<double>(*same_device + probe);
        g *= C(inv);
      }
    for (const Tensor<double>& probe : probes)
      if (!std::isfinite(probe.item())) r.found_inf = true;
    r.unscaled = true;
  }

  // Unscales (unless unscale_ did) and runs optimizer.step() unless a gradient was Inf or NaN. Returns whether
  // the step ran. Once per optimizer per iteration (as torch: a second call before update() is an error).
  template <class Opt>
  bool step(Opt& optimizer) {
    if (!o_.enabled) {
      optimizer.step();
      return true;
    }
    Record& r = records_[&optimizer];  // (unscale_ updates this same entry: a std::map's references stay valid)
    check<std::logic_error>(!r.stepped, "GradScaler::step: already called on this optimizer since the last update()");
    if (!r.unscaled) unscale_(optimizer);
    r.stepped = true;
    if (r.found_inf) return false;
    optimizer.step();
    return true;
  }

  // The next scale: backoff_factor times after an iteration with a non-finite gradient (and the good-step count
  // restarts), growth_factor times after growth_interval good iterations in a row.
  void update() {
    if (!o_.enabled) return;
    check<std::logic_error>(!records_.empty(), "GradScaler::update: no unscale_ or step since the last update()");
    bool found_inf = false;
    for (const auto& [opt, r] : records_) found_inf |= r.found_inf;
    if (found_inf) {
      scale_ *= o_.backoff_factor;
      growth_tracker_ = 0;
    } else if (++growth_tracker_ == o_.growth_interval) {
      // As torch, which keeps the scale in float: a growth past float's range leaves it where it is.
      if (std::isfinite(float(scale_ * o_.growth_factor))) scale_ *= o_.growth_factor;
      growth_tracker_ = 0;
    }
    records_.clear();
  }

  double get_scale() const { return o_.enabled ? scale_ : 1.0; }
  bool is_enabled() const { return o_.enabled; }

  std::map<std::string, AnyTensor> state_dict() const {
    return {{"scale", AnyTensor(full<double>({}, scale_))},
            {"growth_factor", AnyTensor(full<double>({}, o_.growth_factor))},
            {"backoff_factor", AnyTensor(full<double>({}, o_.backoff_factor))},
            {"growth_interval", AnyTensor(full<int64_t>({}, o_.growth_interval))},
            {"_growth_tracker", AnyTensor(full<int64_t>({}, growth_tracker_))}};
  }
  void load_state_dict(const std::map<std::string, AnyTensor>& state) {
    auto get = [&](const char* key) -> const AnyTensor& {
      const auto it = state.find(key);
      check<std::invalid_argument>(it != state.end(), "GradScaler::load_state_dict: missing \"", key, "\"");
      return it->second;
    };
    const double scale = get("scale").as<double>().item();
    check<std::invalid_argument>(scale > 0 && std::isfinite(scale), "GradScaler::load_state_dict: scale ", scale);
    scale_ = scale;
    o_.growth_factor = get("growth_factor").as<double>().item();
    o_.backoff_factor = get("backoff_factor").as<double>().item();
    o_.growth_interval = get("growth_interval").as<int64_t>().item();
    growth_tracker_ = get("_growth_tracker").as<int64_t>().item();
  }

 private:
  struct Record {
    bool unscaled = false, stepped = false, found_inf = false;
  };
  GradScalerOptions o_;
  double scale_;
  int64_t growth_tracker_ = 0;
  std::map<const void*, Record> records_;  // per optimizer, this iteration
};

}  // namespace kiln

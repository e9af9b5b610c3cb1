#pragma once
// Learning-rate schedulers with torch.optim.lr_scheduler's closed forms, stepping every parameter
// group's lr from its initial value: StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR,
// OneCycleLR (cosine annealing and momentum cycling, PyTorch's defaults) and SequentialLR. Call step()
// after the optimizer's step (per epoch, or per batch for OneCycleLR); get_last_lr() gives the current lrs. The lr is a closed
// form of the step count (OneCycleLR's momentum too), so the state_dict is {"last_epoch"}: a scheduler built
// with the same arguments and loaded continues where the saved one stood.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <numbers>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/tensor/any_tensor.hpp"

namespace kiln::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  // Advances one step and sets every group's lr.
  void step() {
    ++epoch_;
    apply();
  }
  int64_t last_epoch() const { return epoch_; }
  const std::vector<double>& get_last_lr() const { return last_lr_; }

  std::map<std::string, AnyTensor> state_dict() const { return {{"last_epoch", full<int64_t>({}, epoch_)}}; }
  // Moves to the saved step and sets the lrs it gives.
  void load_state_dict(const std::map<std::string, AnyTensor>& state) {
    auto it = state.find("last_epoch");
    check<std::invalid_argument>(it != state.end() && state.size() == 1,
                                 "LRScheduler load_state_dict: expected exactly the key \"last_epoch\"");
    check<DTypeError>(it->second.dtype() == ScalarType::Int64 && it->second.numel() == 1,
                      "LRScheduler load_state_dict: \"last_epoch\" must be one int64, got ",
                      dtype_name(it->second.dtype()), " of shape ", it->second.shape());
    epoch_ = it->second.as<int64_t>().reshape({}).item();
    apply();
  }

 protected:
  // lr of a group with initial lr `base` at step `epoch` (0 at construction).
  virtual double lr_at(double base, int64_t epoch) const = 0;

  // Binds to an optimizer's groups (any kiln optimizer: its options have lr(double) and lr()). The
  // base is each group's initial lr, recorded by the first scheduler bound to it (as PyTorch's
  // 'initial_lr'), so that schedulers built one after another (SequentialLR) share it.
  template <class Opt>
  void bind(Opt& optimizer) {
    for (auto& g : optimizer.param_groups()) {
      if (g.initial_lr < 0) g.initial_lr = g.options.lr();
      base_.push_back(g.initial_lr);
    }
    set_lr_ = [&optimizer](size_t k, double lr) { optimizer.param_groups()[k].options.lr(lr); };
    apply();
  }
  void apply() {
    last_lr_.clear();
    for (size_t k = 0; k < base_.size(); ++k) {
      last_lr_.push_back(lr_at(base_[k], epoch_));
      set_lr_(k, last_lr_.back());
    }
    apply_others(epoch_);
  }
  // What a scheduler sets besides the lr at each step (OneCycleLR: the momentum).
  virtual void apply_others(int64_t) {}

  int64_t epoch_ = 0;
  std::vector<double> base_, last_lr_;
  std::function<void(size_t, double)> set_lr_;

  friend class SequentialLR;  // runs its children's lr_at
};

// lr * gamma^(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  template <class Opt>
  StepLR(Opt& optimizer, int64_t step_size, double gamma = 0.1) : step_size_(step_size), gamma_(gamma) {
    check<std::invalid_argument>(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
    bind(optimizer);
  }

 protected:
  double lr_at(double base, int64_t e) const override { return base * std::pow(gamma_, double(e / step_size_)); }

 private:
  int64_t step_size_;
  double gamma_;
};

// lr * gamma^(number of milestones <= epoch)
class MultiStepLR : public LRScheduler {
 public:
  template <class Opt>
  MultiStepLR(Opt& optimizer, std::vector<int64_t> milestones, double gamma = 0.1)
      : milestones_(std::move(milestones)), gamma_(gamma) {
    std::sort(milestones_.begin(), milestones_.end());
    bind(optimizer);
  }

 protected:
  double lr_at(double base, int64_t e) const override {
    const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), e) - milestones_.begin();
    return base * std::pow(gamma_, double(passed));
  }

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// lr * gamma^epoch
class ExponentialLR : public LRScheduler {
 public:
  template <class Opt>
  ExponentialLR(Opt& optimizer, double gamma) : gamma_(gamma) { bind(optimizer); }

 protected:
  double lr_at(double base, int64_t e) const override { return base * std::pow(gamma_, double(e)); }

 private:
  double gamma_;
};

// eta_min + (lr - eta_min) (1 + cos(pi epoch / T_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  template <class Opt>
  CosineAnnealingLR(Opt& optimizer, int64_t t_max, double eta_min = 0) : t_max_(t_max), eta_min_(eta_min) {
    check<std::invalid_argument>(t_max > 0, "CosineAnnealingLR: T_max must be positive, got ", t_max);
    bind(optimizer);
  }

 protected:
  double lr_at(double base, int64_t e) const override {
    return eta_min_ + (base - eta_min_) * (1 + std::cos(std::numbers::pi * double(e) / double(t_max_))) / 2;
  }

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear from start_factor * lr to end_factor * lr over total_iters steps (a warmup), then constant.
class LinearLR : public LRScheduler {
 public:
  template <class Opt>
  LinearLR(Opt& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5)
      : start_(start_factor), end_(end_factor), total_(total_iters) {
    check<std::invalid_argument>(start_factor > 0 && start_factor <= 1 && end_factor >= 0 && end_factor <= 1,
                                 "LinearLR: factors must be in (0, 1] and [0, 1]");
    bind(optimizer);
  }

 protected:
  double lr_at(double base, int64_t e) const override {
    const double t = double(std::min(e, total_)) / double(std::max<int64_t>(total_, 1));
    return base * (start_ + (end_ - start_) * t);
  }

 private:
  double start_, end_;
  int64_t total_;
};

// One cycle (cosine annealing, as PyTorch's default): from max_lr / div_factor up to max_lr over
// pct_start of total_steps, then down to max_lr / (div_factor * final_div_factor). Steps per batch.
class OneCycleLR : public LRScheduler {
 public:
  // cycle_momentum (PyTorch's default): each group's momentum (SGD, RMSprop) or Adam's beta1 runs against the lr,
  // from max_momentum down to base_momentum while the lr rises, and back up while it falls.
  template <class Opt>
  OneCycleLR(Opt& optimizer, double max_lr, int64_t total_steps, double pct_start = 0.3, double div_factor = 25,
             double final_div_factor = 1e4, bool cycle_momentum = true, double base_momentum = 0.85,
             double max_momentum = 0.95)
      : max_lr_(max_lr), total_(total_steps), pct_(pct_start), div_(div_factor), final_div_(final_div_factor),
        base_momentum_(base_momentum), max_momentum_(max_momentum) {
    check<std::invalid_argument>(total_steps > 1, "OneCycleLR: total_steps must be at least 2, got ", total_steps);
    if (cycle_momentum) set_momentum_ = momentum_setter(optimizer);
    bind(optimizer);
  }

 protected:
  double lr_at(double, int64_t e) const override {
    const double initial = max_lr_ / div_, min_lr = initial / final_div_;
    const auto [rising, pct] = phase(e);
    return rising ? anneal(initial, max_lr_, pct) : anneal(max_lr_, min_lr, pct);
  }
  void apply_others(int64_t e) override {
    if (!set_momentum_) return;
    const auto [rising, pct] = phase(e);
    const double m = rising ? anneal(max_momentum_, base_momentum_, pct) : anneal(base_momentum_, max_momentum_, pct);
    for (size_t k = 0; k < base_.size(); ++k) set_momentum_(k, m);
  }

 private:
  // Whether step e is in the rising phase, and how far into its phase it is (0 to 1).
  std::pair<bool, double> phase(int64_t e) const {
    const double up_end = pct_ * double(total_) - 1, down_end = double(total_) - 1;
    const double step = double(std::min<int64_t>(e, total_ - 1));
    if (step <= up_end) return {true, up_end > 0 ? step / up_end : 1.0};
    return {false, (step - up_end) / (down_end - up_end)};
  }
  static double anneal(double from, double to, double pct) {
    return to + (from - to) * (1 + std::cos(std::numbers::pi * pct)) / 2;
  }
  template <class Opt>
  static std::function<void(size_t, double)> momentum_setter(Opt& optimizer) {
    using Options = std::remove_cvref_t<decltype(optimizer.param_groups()[0].options)>;
    if constexpr (requires(Options& o) { o.betas(0.9, o.beta2()); }) {
      return [&optimizer](size_t k, double m) {
        auto& o = optimizer.param_groups()[k].options;
        o.betas(m, o.beta2());
      };
    } else if constexpr (requires(Options& o) { o.momentum(0.9); }) {
      return [&optimizer](size_t k, double m) { optimizer.param_groups()[k].options.momentum(m); };
    } else {
      throw std::invalid_argument("OneCycleLR: cycle_momentum needs an optimizer with a momentum or betas option; "
                                  "pass cycle_momentum = false");
    }
  }

  double max_lr_;
  int64_t total_;
  double pct_, div_, final_div_, base_momentum_, max_momentum_;
  std::function<void(size_t, double)> set_momentum_;
};

// Runs schedulers one after another: the k-th from milestone k-1 on, counting its own steps from 0.
class SequentialLR : public LRScheduler {
 public:
  template <class Opt>
  SequentialLR(Opt& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers, std::vector<int64_t> milestones)
      : schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
    check<std::invalid_argument>(!schedulers_.empty() && schedulers_.size() == milestones_.size() + 1,
                                 "SequentialLR: ", schedulers_.size(), " schedulers need one milestone fewer, got ",
                                 milestones_.size());
    bind(optimizer);
  }

 protected:
  double lr_at(double base, int64_t e) const override {
    size_t k = 0;
    int64_t start = 0;
    while (k < milestones_.size() && e >= milestones_[k]) start = milestones_[k++];
    return schedulers_[k]->lr_at(base, e - start);
  }

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace kiln::optim

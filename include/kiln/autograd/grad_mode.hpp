#pragma once
// Whether operations record the autograd graph (per thread, as in PyTorch).
#include "kiln/core/storage.hpp"

namespace kiln {

namespace autograd::detail {
inline bool& grad_mode_flag() {
  thread_local bool enabled = true;
  return enabled;
}
inline bool& anomaly_mode_flag() {
  thread_local bool enabled = false;
  return enabled;
}
}  // namespace autograd::detail

struct GradMode {
  static bool is_enabled() { return autograd::detail::grad_mode_flag(); }
  static void set_enabled(bool enabled) { autograd::detail::grad_mode_flag() = enabled; }
};

// Sets grad mode for a scope and restores the previous mode after it.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : previous_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~AutoGradMode() { GradMode::set_enabled(previous_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool previous_;
};

// No graph is recorded in its scope (torch.no_grad()).
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

// c10::InferenceMode: no graph is recorded, and the tensors made in its scope are inference tensors, with no
// version counter to maintain (is_inference()). Outside the scope an inference tensor can be read and used
// in no-grad code, but not saved for a backward, set to require grad or updated in place (each throws, as
// in libtorch). InferenceMode(false) inside one restores grad mode and normal tensors.
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true)
      : grad_(!enabled), previous_(kiln::detail::inference_mode_flag()) {
    kiln::detail::inference_mode_flag() = enabled;
  }
  ~InferenceMode() { kiln::detail::inference_mode_flag() = previous_; }
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  static bool is_enabled() { return kiln::detail::inference_mode_flag(); }

 private:
  AutoGradMode grad_;
  bool previous_;
};

namespace autograd {

struct AnomalyMode {
  static bool is_enabled() { return detail::anomaly_mode_flag(); }
  static void set_enabled(bool enabled) { detail::anomaly_mode_flag() = enabled; }
};

// In its scope, a NaN or Inf that a backward node produces throws, naming the node and the
// expression it came from (torch.autograd.detect_anomaly). Costs a scan of every gradient.
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : previous_(AnomalyMode::is_enabled()) { AnomalyMode::set_enabled(true); }
  ~DetectAnomalyGuard() { AnomalyMode::set_enabled(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace autograd

}  // namespace kiln

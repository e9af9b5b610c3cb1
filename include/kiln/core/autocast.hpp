#pragma once
// Autocast (torch.autocast): inside an AutocastGuard the ops PyTorch runs in a lower precision (matrix
// products, convolutions, linear layers, attention) take float operands, round them to bfloat16 or float16,
// compute as that type's tensors do (products accumulate in float) and round the result to it; everything else
// (elementwise expressions, reductions, softmax, losses, norms) runs in float as before.
//
// kiln's dtypes are static, so a region changes the precision a computation runs in, never a tensor's type:
// matmul of two Tensor<float> is a Tensor<float> inside a region too, holding the 16-bit result widened back
// (exactly). Its graph is PyTorch's: float -> 16-bit cast -> the 16-bit op (which saves its 16-bit operands
// for backward) -> float, so gradients flow through the casts and the op's backward runs in the 16-bit type. Double, integer and 16-bit tensors are untouched.
// Backward passes run with autocast off (the engine suspends it): a gradient is computed in the precision its
// forward op used, whether backward() is called inside a region or not.
//
// The state is per thread and per device type, as in PyTorch: an op follows the region of the device its operands
// are on (AutocastGuard(kCUDA) for CUDA tensors, AutocastGuard(kCPU) for host ones).
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>

#include "kiln/core/device.hpp"
#include "kiln/core/dtype.hpp"
#include "kiln/core/error.hpp"

namespace kiln {

struct TensorImpl;

namespace autocast {

namespace detail {
struct State {
  bool enabled;
  ScalarType dtype;
};
// PyTorch's defaults: bfloat16 on the CPU, float16 on CUDA.
inline State& state(DeviceType device) {
  thread_local State states[2] = {{false, ScalarType::BFloat16}, {false, ScalarType::Half}};
  return states[int(device)];
}
}  // namespace detail

// torch.is_autocast_enabled(device_type) and torch.get_autocast_dtype(device_type).
inline bool is_enabled(DeviceType device = kCPU) { return detail::state(device).enabled; }
inline ScalarType get_dtype(DeviceType device = kCPU) { return detail::state(device).dtype; }

// PyTorch's autocast cache: within the outermost region, the 16-bit copy of a weight (a float leaf that requires
// grad) is made once and reused by every op that casts it (tensor/autocast_cast.hpp); cleared when the outermost
// guard ends, or by clear_cache() (torch.clear_autocast_cache).
struct CachedCast {
  std::weak_ptr<TensorImpl> source;  // the weight (an address can be reused after it is freed)
  uint64_t version;                  // the weight's version when it was cast
  std::shared_ptr<TensorImpl> cast;  // the 16-bit copy, recorded with its cast node
};
namespace detail {
struct CastKey {
  const TensorImpl* source;
  ScalarType dtype;
  bool operator==(const CastKey&) const = default;
};
struct CastKeyHash {
  size_t operator()(const CastKey& k) const noexcept {
    return std::hash<const void*>()(k.source) ^ (size_t(k.dtype) * 0x9E3779B97F4A7C15ull);
  }
};
using CastCache = std::unordered_map<CastKey, CachedCast, CastKeyHash>;
inline CastCache& cast_cache() {
  thread_local CastCache cache;
  return cache;
}
inline int& nesting() {  // AutocastGuards alive on this thread
  thread_local int depth = 0;
  return depth;
}
}  // namespace detail
inline void clear_cache() { detail::cast_cache().clear(); }

// f(H{}) with H the autocast type (bfloat16 or float16) of the device type an op runs on: what an autocast op calls
// for its float case.
template <class F>
decltype(auto) with_dtype(DeviceType device, F&& f) {
  if (get_dtype(device) == ScalarType::Half) return std::forward<F>(f)(float16{});
  return std::forward<F>(f)(bfloat16{});
}

}  // namespace autocast

// torch.autocast(device_type, dtype, enabled) as a scope: sets the device's autocast state and restores the
// previous one at the end of the scope; nests (AutocastGuard(kCPU, kBFloat16, false) turns it off inside).
class AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType device = kCPU, bool enabled = true)
      : AutocastGuard(device, autocast::get_dtype(device), enabled) {}
  AutocastGuard(DeviceType device, ScalarType dtype, bool enabled = true)
      : device_(device), previous_(autocast::detail::state(device)) {
    check(dtype == ScalarType::BFloat16 || dtype == ScalarType::Half,
          "AutocastGuard: autocast runs ops in bfloat16 or float16, not ", dtype_name(dtype));
    autocast::detail::state(device) = {enabled, dtype};
    ++autocast::detail::nesting();
  }
  ~AutocastGuard() {
    autocast::detail::state(device_) = previous_;
    if (--autocast::detail::nesting() == 0) autocast::clear_cache();
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  autocast::detail::State previous_;
};

}  // namespace kiln

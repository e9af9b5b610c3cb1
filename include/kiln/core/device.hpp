#pragma once
// Where a tensor's memory is, as libtorch spells it: kiln::Device(kCUDA, 1), kCPU, str() "cuda:1"; a CUDA device
// without an index is device 0 (kiln has no current-device state yet).
//
// The core moves memory to and from CUDA devices through CudaHooks, which <kiln/cuda.hpp> registers when a
// program includes it (cuda/tensor_hooks.hpp), so a CPU-only program carries no CUDA code and a CUDA tensor asked
// for without the backend is a clear error. Device memory is never read by CPU code: TensorImpl::data_bytes()
// refuses a CUDA tensor (core/tensor_impl.hpp).
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/core/error.hpp"

namespace kiln {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
inline constexpr DeviceType kCPU = DeviceType::CPU, kCUDA = DeviceType::CUDA;

class Device {
 public:
  Device(DeviceType type = kCPU, int index = -1) : type_(type), index_(type == kCUDA && index < 0 ? 0 : index) {
    check<std::invalid_argument>(type == kCUDA || index <= 0, "kiln::Device: the CPU has no device ", index);
  }
  // "cpu", "cuda" or "cuda:N", as libtorch's Device("cuda:1"); anything else is refused naming it.
  explicit Device(const std::string& spec) : Device(parse(spec)) {}
  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == kCPU; }
  bool is_cuda() const { return type_ == kCUDA; }
  std::string str() const { return is_cpu() ? "cpu" : detail::cat("cuda:", index_); }
  friend bool operator==(const Device&, const Device&) = default;

 private:
  static Device parse(const std::string& spec) {
    if (spec == "cpu") return Device(kCPU);
    if (spec == "cuda") return Device(kCUDA);
    const std::string digits = spec.rfind("cuda:", 0) == 0 ? spec.substr(5) : "";
    check<std::invalid_argument>(!digits.empty() && digits.size() <= 4 &&
                                     digits.find_first_not_of("0123456789") == std::string::npos,
                                 "kiln::Device: \"", spec, "\" is not a device (cpu, cuda or cuda:N)");
    return Device(kCUDA, std::stoi(digits));
  }

  DeviceType type_;
  int index_;
};

namespace detail {

// The CUDA backend's memory operations, as the core calls them (registered by <kiln/cuda.hpp>).
struct CudaHooks {
  void* (*allocate)(int device, size_t bytes);
  void (*free)(int device, void* p);
  // Copies bytes between host memory and device memory (or two devices); synchronous for the host.
  void (*copy)(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
  // Sets bytes of device memory to zero (in the device's order of work).
  void (*zero)(void* p, Device device, size_t bytes);
};

inline const CudaHooks*& cuda_hooks() {
  static const CudaHooks* hooks = nullptr;
  return hooks;
}

// The hooks, or an error naming `what` when the program was built without the CUDA backend.
inline const CudaHooks& require_cuda(const char* what) {
  const CudaHooks* h = cuda_hooks();
  check<std::runtime_error>(h != nullptr, what, ": CUDA tensors need kiln's CUDA backend, which this program does not "
                                                "include (#include <kiln/cuda.hpp>)");
  return *h;
}

}  // namespace detail

}  // namespace kiln

#pragma once
// The CUDA driver (libcuda), loaded at run time, and the device queries of torch.cuda:
// kiln::cuda::is_available(), device_count(), and each device's architecture (what NVRTC compiles for).
// A machine without the driver or without a device is an ordinary answer (false, 0), not an error;
// Driver::get() on such a machine throws CudaUnavailableError saying which.
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/cuda/dynlib.hpp"

namespace kiln::cuda {

// A CUDA driver call failed on a device that is there (an illegal address, a launch that does not fit...).
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Driver {
 public:
  // The initialized driver; throws CudaUnavailableError when libcuda is missing or cuInit fails.
  // KILN_CUDA_DRIVER_LIBRARY names the library to load instead of libcuda.so.1.
  static Driver& get() {
    static Driver* instance = new Driver;  // never unloaded: device memory may be freed during static destruction
    return *instance;
  }

  int device_count() const { return int(archs_.size()); }
  // The device's compute capability as NVRTC's architecture number: 90 for sm_90.
  int arch(int device) const {
    if (device < 0 || device >= device_count())
      throw std::out_of_range(kiln::detail::cat("kiln::cuda: device ", device, " does not exist (", device_count(),
                                                " CUDA devices)"));
    return archs_[size_t(device)];
  }
  // The driver's CUDA version as major * 1000 + minor * 10.
  int version() const { return version_; }

  // The driver's function `name` (cuda/runtime.hpp calls through these), as F.
  template <class F>
  F symbol(const char* name) const {
    return lib_.symbol<F>(name);
  }
  // Throws CudaError naming the call and the driver's reason unless status is CUDA_SUCCESS.
  void require(int status, const char* call) const {
    if (status != 0) throw CudaError(message(status, call));
  }

 private:
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  using DeviceGetFn = int (*)(int*, int);
  using AttributeFn = int (*)(int*, int, int);
  using VersionFn = int (*)(int*);
  static constexpr int kNoDevice = 100;              // CUDA_ERROR_NO_DEVICE
  static constexpr int kCapabilityMajor = 75, kCapabilityMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*

  static std::vector<std::string> library_names() {
    if (const char* env = std::getenv("KILN_CUDA_DRIVER_LIBRARY"); env && *env) return {env};
    return {"libcuda.so.1", "libcuda.so"};
  }

  Driver() : lib_("the CUDA driver (libcuda)", library_names()) {
    const int init = lib_.symbol<InitFn>("cuInit")(0);
    if (init == kNoDevice) return;
    check(init, "cuInit");
    check(lib_.symbol<VersionFn>("cuDriverGetVersion")(&version_), "cuDriverGetVersion");
    int n = 0;
    check(lib_.symbol<CountFn>("cuDeviceGetCount")(&n), "cuDeviceGetCount");
    const auto device_get = lib_.symbol<DeviceGetFn>("cuDeviceGet");
    const auto attribute = lib_.symbol<AttributeFn>("cuDeviceGetAttribute");
    for (int i = 0; i < n; ++i) {
      int dev = 0, major = 0, minor = 0;
      check(device_get(&dev, i), "cuDeviceGet");
      check(attribute(&major, kCapabilityMajor, dev), "cuDeviceGetAttribute");
      check(attribute(&minor, kCapabilityMinor, dev), "cuDeviceGetAttribute");
      archs_.push_back(major * 10 + minor);
    }
  }

  std::string message(int status, const char* call) const {
    using ErrorStringFn = int (*)(int, const char**);
    const char* text = nullptr;
    lib_.symbol<ErrorStringFn>("cuGetErrorString")(status, &text);
    return kiln::detail::cat("kiln::cuda: ", call, " failed: ", text ? text : "unknown error", " (", status, ")");
  }
  // During initialization a failure means CUDA is unavailable.
  void check(int status, const char* call) const {
    if (status != 0) throw CudaUnavailableError(message(status, call));
  }

  DynamicLibrary lib_;
  int version_ = 0;
  std::vector<int> archs_;
};

// torch.cuda.device_count(): 0 where there is no driver or no device.
inline int device_count() noexcept {
  try {
    return Driver::get().device_count();
  } catch (const std::exception&) {
    return 0;
  }
}

// torch.cuda.is_available().
inline bool is_available() noexcept { return device_count() > 0; }

}  // namespace kiln::cuda

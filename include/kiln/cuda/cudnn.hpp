#pragma once
// cuDNN, loaded at run time as cuBLAS is (cuda/cublas.hpp): a program that uses it builds without the CUDA Toolkit's
// headers and starts without the library. KILN_CUDNN_LIBRARY names the library to load instead of libcudnn.so.9 / .8.
// kiln calls cuDNN's legacy API (descriptors, cudnnConvolutionForward...: present in cuDNN 8 and 9), for conv2d and
// training-mode batch norm of CUDA tensors (cuda/cudnn_conv.hpp, cuda/cudnn_batch_norm.hpp).
//
// cuDNN is optional, as in PyTorch: where the library is missing, or its handle cannot be made on a device (a cuDNN
// that needs a newer driver), those ops run on kiln's own kernels (im2col around cuBLAS; batch norm as reductions and
// expressions) and KILN_DEBUG says why once. The switches follow torch.backends.cudnn:
//   cudnn_enabled(bool)       torch.backends.cudnn.enabled (on): off, every op takes kiln's own kernels;
//   cudnn_allow_tf32(bool)    torch.backends.cudnn.allow_tf32: OFF by default here (torch: on), so a float convolution
//                             on a GPU agrees with the CPU's to float rounding unless asked otherwise, as kiln's
//                             matmul (cuda::matmul_allow_tf32);
//   cudnn_deterministic(bool) torch.backends.cudnn.deterministic (off): only algorithms cuDNN reports deterministic;
//   cudnn_benchmark(bool)     torch.backends.cudnn.benchmark (off): the first convolution of each shape times every
//                             algorithm on its operands (cudnnFind...AlgorithmEx) and keeps the fastest the switches
//                             allow; off, cuDNN's heuristics (the _v7 queries) choose without running anything.
// The choice is remembered per shape, device and switches.
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/dtype.hpp"
#include "kiln/cuda/current_stream.hpp"
#include "kiln/cuda/runtime.hpp"

namespace kiln::cuda {

// The few cuDNN types and constants kiln uses, with the values of cudnn_graph.h, cudnn_ops.h and cudnn_cnn.h.
namespace dnn {
using Handle = void*;
using Descriptor = void*;
enum DataType : int { kFloat = 0, kDouble = 1, kHalf = 2, kBFloat16 = 9 };  // cudnnDataType_t
enum MathType : int { kDefaultMath = 0, kTensorOpMath = 1, kTensorOpMathAllowConversion = 2, kFmaMath = 3 };
inline constexpr int kNchw = 0;              // CUDNN_TENSOR_NCHW
inline constexpr int kCrossCorrelation = 1;  // CUDNN_CROSS_CORRELATION (torch's convolution)
inline constexpr int kBatchNormSpatial = 1;  // CUDNN_BATCHNORM_SPATIAL: statistics per channel over N, H, W
inline constexpr int kDeterministic = 1;     // CUDNN_DETERMINISTIC
// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: one layout for the three.
struct AlgoPerf {
  int algo;
  int status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};

template <class T>
constexpr DataType data_type() {
  if constexpr (std::is_same_v<T, float>) return kFloat;
  else if constexpr (std::is_same_v<T, double>) return kDouble;
  else if constexpr (std::is_same_v<T, float16>) return kHalf;
  else {
    static_assert(std::is_same_v<T, bfloat16>, "kiln::cuda: cuDNN takes float, double, float16 or bfloat16");
    return kBFloat16;
  }
}
// The type of alpha, beta and a convolution's accumulation: double for double data, float otherwise.
template <class T>
using scaling_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
}  // namespace dnn

namespace detail {
struct CudnnSwitches {
  std::atomic<bool> enabled{true}, allow_tf32{false}, deterministic{false}, benchmark{false};
};
inline CudnnSwitches& cudnn_switches() {
  static CudnnSwitches switches;
  return switches;
}
}  // namespace detail

inline void cudnn_enabled(bool on) { detail::cudnn_switches().enabled = on; }
inline bool cudnn_is_enabled() { return detail::cudnn_switches().enabled; }
inline void cudnn_allow_tf32(bool allow) { detail::cudnn_switches().allow_tf32 = allow; }
inline bool cudnn_allows_tf32() { return detail::cudnn_switches().allow_tf32; }
inline void cudnn_deterministic(bool on) { detail::cudnn_switches().deterministic = on; }
inline bool cudnn_is_deterministic() { return detail::cudnn_switches().deterministic; }
inline void cudnn_benchmark(bool on) { detail::cudnn_switches().benchmark = on; }
inline bool cudnn_benchmark_enabled() { return detail::cudnn_switches().benchmark; }

class Cudnn {
 public:
  // The loaded library; throws CudaUnavailableError where it is missing.
  static Cudnn& get() {
    static Cudnn* instance = new Cudnn;  // never unloaded: its handles live until the process ends
    return *instance;
  }

  // Whether ops on `device` should go through cuDNN: enabled, the library loads and a handle can be made there.
  // Decided once per device (KILN_DEBUG prints why not).
  static bool usable(int device) {
    if (!cudnn_is_enabled()) return false;
    static std::mutex mutex;
    static std::map<int, bool> decided;
    std::lock_guard lock(mutex);
    const auto it = decided.find(device);
    if (it != decided.end()) return it->second;
    bool ok = false;
    try {
      get().handle(device);
      ok = true;
    } catch (const std::exception& e) {
      if (std::getenv("KILN_DEBUG"))
        std::cerr << "[kiln] cuDNN not used on cuda:" << device << " (kiln's own kernels instead): " << e.what() << "\n";
    }
    decided[device] = ok;
    return ok;
  }

  // This thread's handle for device `device`, ready for a call: the device's context current, bound to the thread's
  // current stream (cuda/stream.hpp), so cuDNN's work is ordered with kiln's kernels. One handle per thread and
  // device, made at the thread's first call (never destroyed: a handle lives as long as the process): cuDNN forbids
  // two threads using one handle at once, and a shared handle's stream, set by one thread, would be another's.
  dnn::Handle handle(int device) {
    DeviceContext::get(device).make_current();
    thread_local std::map<int, dnn::Handle> handles;
    dnn::Handle& h = handles[device];
    if (!h) require(create_(&h), "cudnnCreate");
    require(set_stream_(h, reinterpret_cast<void*>(current_stream_of(device))), "cudnnSetStream");
    return h;
  }

  // Throws CudaError naming the call and cuDNN's status unless status is CUDNN_STATUS_SUCCESS.
  void require(int status, const std::string& call) const {
    if (status == 0) return;
    const char* text = error_string_(status);
    throw CudaError(kiln::detail::cat("kiln::cuda: ", call, " failed: ", text ? text : "cuDNN status", " (", status,
                                      "); kiln::cuda::cudnn_enabled(false) runs these ops on kiln's own kernels"));
  }

  enum class Kind { Tensor, Filter, Convolution };
  // A descriptor, destroyed with its owner.
  class OwnedDescriptor {
   public:
    OwnedDescriptor(Kind kind, dnn::Descriptor d) : kind_(kind), d_(d) {}
    OwnedDescriptor(OwnedDescriptor&& o) noexcept : kind_(o.kind_), d_(std::exchange(o.d_, nullptr)) {}
    OwnedDescriptor& operator=(OwnedDescriptor&&) = delete;
    ~OwnedDescriptor() {
      if (d_) Cudnn::get().destroy_[int(kind_)](d_);
    }
    dnn::Descriptor get() const { return d_; }

   private:
    Kind kind_;
    dnn::Descriptor d_;
  };
  OwnedDescriptor make(Kind kind) const {
    dnn::Descriptor d = nullptr;
    require(create_descriptor_[int(kind)](&d), kiln::detail::cat("cudnnCreate", kind_names_[int(kind)], "Descriptor"));
    return OwnedDescriptor(kind, d);
  }

  // A contiguous NCHW tensor descriptor of dtype `type`.
  OwnedDescriptor tensor_4d(dnn::DataType type, int n, int c, int h, int w) const {
    OwnedDescriptor d = make(Kind::Tensor);
    require(set_tensor_4d_(d.get(), type, n, c, h, w, c * h * w, h * w, w, 1),
            kiln::detail::cat("cudnnSetTensor4dDescriptorEx([", n, ", ", c, ", ", h, ", ", w, "])"));
    return d;
  }

  template <class F>
  F symbol(const char* name) const {
    return lib_.symbol<F>(name);
  }
  size_t version() const { return version_(); }
  const std::string& path() const { return lib_.path(); }

 private:
  static std::vector<std::string> library_names() {
    if (const char* env = std::getenv("KILN_CUDNN_LIBRARY"); env && *env) return {env};
    return {"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so", "/usr/local/cuda/lib64/libcudnn.so"};
  }

  Cudnn()
      : lib_("cuDNN (libcudnn)", library_names()),
        version_(lib_.symbol<size_t (*)()>("cudnnGetVersion")),
        create_(lib_.symbol<int (*)(dnn::Handle*)>("cudnnCreate")),
        set_stream_(lib_.symbol<int (*)(dnn::Handle, void*)>("cudnnSetStream")),
        error_string_(lib_.symbol<const char* (*)(int)>("cudnnGetErrorString")),
        set_tensor_4d_(lib_.symbol<int (*)(dnn::Descriptor, int, int, int, int, int, int, int, int, int)>(
            "cudnnSetTensor4dDescriptorEx")) {
    for (int k = 0; k < 3; ++k) {
      create_descriptor_[k] = lib_.symbol<int (*)(dnn::Descriptor*)>(
          kiln::detail::cat("cudnnCreate", kind_names_[k], "Descriptor").c_str());
      destroy_[k] = lib_.symbol<int (*)(dnn::Descriptor)>(
          kiln::detail::cat("cudnnDestroy", kind_names_[k], "Descriptor").c_str());
    }
    if (version_() < 8000)
      throw CudaUnavailableError(kiln::detail::cat("kiln::cuda: cuDNN ", version_(), " at ", lib_.path(),
                                                   " is older than 8.0, which kiln needs"));
  }

  DynamicLibrary lib_;
  size_t (*version_)();
  int (*create_)(dnn::Handle*);
  int (*set_stream_)(dnn::Handle, void*);
  const char* (*error_string_)(int);
  int (*set_tensor_4d_)(dnn::Descriptor, int, int, int, int, int, int, int, int, int);
  static constexpr const char* kind_names_[3] = {"Tensor", "Filter", "Convolution"};
  int (*create_descriptor_[3])(dnn::Descriptor*) = {};
  int (*destroy_[3])(dnn::Descriptor) = {};
};

}  // namespace kiln::cuda

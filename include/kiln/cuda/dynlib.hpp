#pragma once
// Run-time loading of the CUDA libraries (libcuda, NVRTC, ...), so a program built with kiln's CUDA backend
// starts and runs on the CPU where they are missing; asking for them then throws CudaUnavailableError naming
// the library and every place that was tried.
#include <dlfcn.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/core/error.hpp"

namespace kiln::cuda {

// A CUDA library, driver or device that kiln needs is not there.
struct CudaUnavailableError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class DynamicLibrary {
 public:
  // Opens the first of `names` that loads (sonames are searched as dlopen does: LD_LIBRARY_PATH, the
  // loader's cache; a path is opened as it is). `what` names the library in errors ("NVRTC").
  DynamicLibrary(const char* what, const std::vector<std::string>& names) : what_(what) {
    std::string tried;
    for (const std::string& name : names) {
      handle_ = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle_) {
        path_ = name;
        return;
      }
      const char* reason = ::dlerror();
      tried += kiln::detail::cat("\n  ", name, ": ", reason ? reason : "not found");
    }
    throw CudaUnavailableError(kiln::detail::cat("kiln::cuda: cannot load ", what, "; tried:", tried));
  }
  ~DynamicLibrary() {
    if (handle_) ::dlclose(handle_);
  }
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // The function `name` as F (a function pointer type); throws if the library lacks it.
  template <class F>
  F symbol(const char* name) const {
    void* p = ::dlsym(handle_, name);
    if (!p) throw CudaUnavailableError(kiln::detail::cat("kiln::cuda: ", what_, " (", path_, ") has no ", name));
    return reinterpret_cast<F>(p);
  }
  const std::string& path() const { return path_; }

 private:
  const char* what_;
  std::string path_;
  void* handle_ = nullptr;
};

}  // namespace kiln::cuda

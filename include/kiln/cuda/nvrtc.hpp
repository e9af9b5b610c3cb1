#pragma once
// NVRTC, loaded at run time: CUDA C++ source to a cubin for one GPU architecture (sm_80 -> 80), or to PTX
// when this NVRTC does not know the architecture (the driver compiles PTX for the device on load).
// A compile failure throws NvrtcCompileError with NVRTC's log and the source line it points at.
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/cuda/dynlib.hpp"

namespace kiln::cuda {

// NVRTC rejected a program. what() holds the program's name, the architecture, NVRTC's log and the
// offending source line; source() the whole program.
struct NvrtcCompileError : std::runtime_error {
  NvrtcCompileError(const std::string& message, std::string src)
      : std::runtime_error(message), source_(std::move(src)) {}
  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

struct CompiledProgram {
  std::string binary;  // a cubin (ELF), or PTX text when is_cubin is false
  bool is_cubin = true;
  int arch = 0;        // what the binary is for: 90 = sm_90 (or compute_90 PTX)
  std::string log;     // NVRTC's and ptxas' messages (register and spill counts per kernel)

  // Bytes of register spill stores over all kernels, from ptxas' report (0 for PTX).
  int64_t spill_store_bytes() const {
    static const std::regex spill(R"((\d+) bytes spill stores)");
    int64_t sum = 0;
    for (auto it = std::sregex_iterator(log.begin(), log.end(), spill); it != std::sregex_iterator(); ++it)
      sum += std::stoll((*it)[1].str());
    return sum;
  }
};

class Nvrtc {
 public:
  // The process-wide NVRTC; throws CudaUnavailableError when it cannot be loaded. KILN_NVRTC_LIBRARY
  // names the library to use instead of the usual sonames.
  static Nvrtc& get() {
    static Nvrtc instance;
    return instance;
  }

  // NVRTC's version as major * 1000 + minor * 10 (13.0 -> 13000, as CUDA_VERSION).
  int version() const { return version_; }
  // The architectures this NVRTC compiles cubins for (80, 86, 89, 90, ...).
  const std::vector<int>& supported_archs() const { return archs_; }

  // Compiles `source` (named `name` in messages) for architecture `arch` with `options` added to kiln's own
  // (-std=c++17, the architecture, ptxas' resource report, no warning for unused tape values).
  CompiledProgram compile(const std::string& source, const std::string& name, int arch,
                          const std::vector<std::string>& options = {}) const {
    CompiledProgram out;
    out.is_cubin = std::find(archs_.begin(), archs_.end(), arch) != archs_.end();
    out.arch = out.is_cubin ? arch : ptx_fallback(arch);
    std::vector<std::string> opts = {
        kiln::detail::cat("--gpu-architecture=", out.is_cubin ? "sm_" : "compute_", out.arch), "-std=c++17",
        "--diag-suppress=177"};  // "declared but never referenced": the tape keeps values a derivative may not use
    if (out.is_cubin) opts.push_back("--ptxas-options=-v");
    opts.insert(opts.end(), options.begin(), options.end());
    std::vector<const char*> argv;
    for (const std::string& o : opts) argv.push_back(o.c_str());

    Program program;
    check_call(create_(&program.handle, source.c_str(), name.c_str(), 0, nullptr, nullptr), "nvrtcCreateProgram");
    program.destroy = destroy_;
    const int status = compile_(program.handle, int(argv.size()), argv.data());
    size_t log_size = 0;
    check_call(log_size_(program.handle, &log_size), "nvrtcGetProgramLogSize");
    out.log.assign(log_size, '\0');
    if (log_size > 0) check_call(log_(program.handle, out.log.data()), "nvrtcGetProgramLog");
    while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
    if (status != 0) throw compile_error(source, name, out.log, opts[0], status);
    size_t size = 0;
    check_call((out.is_cubin ? cubin_size_ : ptx_size_)(program.handle, &size), "nvrtcGet(CUBIN|PTX)Size");
    out.binary.assign(size, '\0');
    check_call((out.is_cubin ? cubin_ : ptx_)(program.handle, out.binary.data()), "nvrtcGet(CUBIN|PTX)");
    if (!out.is_cubin && !out.binary.empty() && out.binary.back() == '\0') out.binary.pop_back();
    return out;
  }

 private:
  using Handle = void*;
  using CreateFn = int (*)(Handle*, const char*, const char*, int, const char* const*, const char* const*);
  using DestroyFn = int (*)(Handle*);
  using CompileFn = int (*)(Handle, int, const char* const*);
  using SizeFn = int (*)(Handle, size_t*);
  using GetFn = int (*)(Handle, char*);
  using VersionFn = int (*)(int*, int*);
  using ErrorStringFn = const char* (*)(int);
  using NumArchsFn = int (*)(int*);
  using ArchsFn = int (*)(int*);

  // Destroys the program however compile() leaves.
  struct Program {
    Handle handle = nullptr;
    DestroyFn destroy = nullptr;
    ~Program() {
      if (handle) destroy(&handle);
    }
  };

  static std::vector<std::string> library_names() {
    if (const char* env = std::getenv("KILN_NVRTC_LIBRARY"); env && *env) return {env};
    return {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so"};
  }

  Nvrtc()
      : lib_("NVRTC", library_names()),
        create_(lib_.symbol<CreateFn>("nvrtcCreateProgram")),
        destroy_(lib_.symbol<DestroyFn>("nvrtcDestroyProgram")),
        compile_(lib_.symbol<CompileFn>("nvrtcCompileProgram")),
        log_size_(lib_.symbol<SizeFn>("nvrtcGetProgramLogSize")),
        log_(lib_.symbol<GetFn>("nvrtcGetProgramLog")),
        cubin_size_(lib_.symbol<SizeFn>("nvrtcGetCUBINSize")),
        cubin_(lib_.symbol<GetFn>("nvrtcGetCUBIN")),
        ptx_size_(lib_.symbol<SizeFn>("nvrtcGetPTXSize")),
        ptx_(lib_.symbol<GetFn>("nvrtcGetPTX")),
        error_string_(lib_.symbol<ErrorStringFn>("nvrtcGetErrorString")) {
    int major = 0, minor = 0;
    check_call(lib_.symbol<VersionFn>("nvrtcVersion")(&major, &minor), "nvrtcVersion");
    version_ = major * 1000 + minor * 10;
    int n = 0;
    check_call(lib_.symbol<NumArchsFn>("nvrtcGetNumSupportedArchs")(&n), "nvrtcGetNumSupportedArchs");
    archs_.resize(size_t(n));
    if (n > 0) check_call(lib_.symbol<ArchsFn>("nvrtcGetSupportedArchs")(archs_.data()), "nvrtcGetSupportedArchs");
  }

  // The newest architecture at or below `arch` that this NVRTC knows, for PTX the driver can still load.
  int ptx_fallback(int arch) const {
    int best = 0;
    for (int a : archs_)
      if (a <= arch) best = std::max(best, a);
    if (best == 0)
      throw CudaUnavailableError(kiln::detail::cat("kiln::cuda: NVRTC ", version_ / 1000, ".", version_ % 1000 / 10,
                                                   " cannot compile for sm_", arch, " or any older architecture"));
    return best;
  }

  void check_call(int status, const char* call) const {
    if (status != 0)
      throw std::runtime_error(kiln::detail::cat("kiln::cuda: ", call, " failed: ", error_string_(status)));
  }

  // The log names lines as "<name>(<line>): error: ..."; the first such line's source is quoted.
  NvrtcCompileError compile_error(const std::string& source, const std::string& name, const std::string& log,
                                  const std::string& arch_option, int status) const {
    std::string message = kiln::detail::cat("kiln::cuda: NVRTC could not compile ", name, " (", arch_option, "): ",
                                            error_string_(status), "\n", log);
    const std::regex where(R"(\((\d+)\): error)");
    std::smatch m;
    if (std::regex_search(log, m, where)) {
      const int line = std::stoi(m[1].str());
      std::istringstream in(source);
      std::string text;
      for (int i = 0; i < line && std::getline(in, text); ++i) {
      }
      message += kiln::detail::cat("\nsource line ", line, ": ", text);
    }
    return NvrtcCompileError(message, source);
  }

  DynamicLibrary lib_;
  CreateFn create_;
  DestroyFn destroy_;
  CompileFn compile_;
  SizeFn log_size_;
  GetFn log_;
  SizeFn cubin_size_;
  GetFn cubin_;
  SizeFn ptx_size_;
  GetFn ptx_;
  ErrorStringFn error_string_;
  int version_ = 0;
  std::vector<int> archs_;
};

}  // namespace kiln::cuda

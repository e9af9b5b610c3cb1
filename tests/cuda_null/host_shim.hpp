#pragma once
// Runs generated CUDA kernels on the host, so their meaning is checked without a GPU: the sources are compiled
// by the system's C++ compiler (c++, or $CXX) together with a shim that defines what CUDA provides (blockIdx,
// threadIdx, __global__, the math functions' float overloads, the bit casts), loaded with dlopen, and each
// kernel is called once per (block, thread) of a small grid, which also walks its grid-stride loop.
// Kernels that cooperate within a block (KernelSource::block_threads: shared memory and __syncthreads) run each
// block as that many host threads meeting at a barrier, over one shared-memory array.
// Signed overflow wraps (-fwrapv), as it does on the GPU.
#include <dlfcn.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/cuda/codegen.hpp"
#include "kiln/cuda/nvrtc.hpp"

namespace kiln::test {

inline constexpr const char* kHostShim = R"SHIM(#include <barrier>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
struct kiln_shim_dim { unsigned x, y, z; };
static thread_local kiln_shim_dim threadIdx, blockIdx;
static kiln_shim_dim blockDim, gridDim;
using std::abs; using std::ceil; using std::cos; using std::erf; using std::exp; using std::exp2; using std::expm1;
using std::fabs; using std::floor; using std::fmax; using std::fmin; using std::log; using std::log1p; using std::log2;
using std::pow; using std::rint; using std::sin; using std::sqrt; using std::tan; using std::tanh; using std::trunc;
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
template <class T> inline T min(T a, T b) { return b < a ? b : a; }
template <class T> inline T max(T a, T b) { return a < b ? b : a; }
static std::mutex kiln_shim_atomic;
template <class T> inline T atomicAdd(T* p, T v) {
  std::lock_guard<std::mutex> lock(kiln_shim_atomic);
  const T old = *p;
  *p = T(old + v);
  return old;
}
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline double __longlong_as_double(long long u) { double f; std::memcpy(&f, &u, 8); return f; }
// A cooperating block: its threads, its barrier and its shared memory (one block runs at a time).
alignas(16) unsigned char kiln_smem[256 * 1024];
static std::barrier<>* kiln_shim_block_barrier = nullptr;
inline void __syncthreads() { kiln_shim_block_barrier->arrive_and_wait(); }
template <class Kernel>
void kiln_shim_run_blocks(unsigned grid, unsigned block, Kernel kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned b = 0; b < grid; ++b) {
    std::barrier<> barrier(block);
    kiln_shim_block_barrier = &barrier;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([=] {
        blockIdx = {b, 0, 0};
        threadIdx = {t, 0, 0};
        kernel();
      });
    for (std::thread& th : threads) th.join();
  }
}
)SHIM";

class HostShim {
 public:
  // Adds a kernel; call before build().
  void add(const cuda::KernelSource& k) {
    source_ += k.source;
    const std::string desc = k.entry + "_desc";
    const std::string call = kiln::detail::cat(k.entry, k.descriptor_by_pointer ? "(static_cast<const " : "(*static_cast<const ",
                                               desc, "*>(desc))");
    if (k.block_threads > 0) {  // cooperating threads: the block size is the kernel's
      source_ += kiln::detail::cat("extern \"C\" void ", k.entry, "_host(const void* desc, unsigned grid, unsigned) {\n",
                                   "  kiln_shim_run_blocks(grid, ", k.block_threads, ", [=] { ", call, "; });\n}\n");
      return;
    }
    source_ += kiln::detail::cat("extern \"C\" void ", k.entry, "_host(const void* desc, unsigned grid, unsigned block) {\n",
                                 "  gridDim = {grid, 1, 1}; blockDim = {block, 1, 1};\n",
                                 "  for (unsigned b = 0; b < grid; ++b)\n",
                                 "    for (unsigned t = 0; t < block; ++t) {\n",
                                 "      blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0};\n", "      ", call, ";\n", "    }\n}\n");
  }

  // Compiles everything added into a shared library and loads it.
  void build() {
    dir_ = std::filesystem::temp_directory_path() / kiln::detail::cat("kiln-host-shim-", ::getpid(), "-", this);
    std::filesystem::create_directories(dir_);
    const auto src = dir_ / "kernels.cpp", lib = dir_ / "kernels.so", log = dir_ / "compile.log";
    std::ofstream(src) << kHostShim << source_;
    const char* cxx = std::getenv("CXX");
    const std::string command = kiln::detail::cat(cxx && *cxx ? cxx : "c++", " -std=c++20 -O1 -fwrapv -shared -fPIC -pthread -w ",
                                                  src, " -o ", lib, " >", log, " 2>&1");
    if (std::system(command.c_str()) != 0) {
      std::ifstream in(log);
      throw std::runtime_error("host shim: " + command + " failed:\n" +
                               std::string(std::istreambuf_iterator<char>(in), {}));
    }
    handle_ = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error(std::string("host shim: dlopen: ") + ::dlerror());
  }

  // Runs kernel `entry` on a grid of `grid` x `block` threads with the descriptor block `words`.
  void run(const std::string& entry, const std::vector<uint64_t>& words, unsigned grid = 3, unsigned block = 32) const {
    using Launch = void (*)(const void*, unsigned, unsigned);
    auto launch = reinterpret_cast<Launch>(::dlsym(handle_, (entry + "_host").c_str()));
    if (!launch) throw std::runtime_error("host shim: no kernel " + entry);
    launch(words.data(), grid, block);
  }

  ~HostShim() {
    if (handle_) ::dlclose(handle_);
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

 private:
  std::string source_;
  std::filesystem::path dir_;
  void* handle_ = nullptr;
};

// Kernels for the host shim, each run once with its descriptor block and then checked (the check holds the
// arrays the block points at); all are compiled together, by the host compiler and as one NVRTC program.
class ShimSuite {
 public:
  struct Run {
    std::string label, entry;
    std::vector<uint64_t> words;
    std::function<void()> verify;
  };

  // A fresh entry name for a kernel.
  std::string entry(std::string_view stem) const { return kiln::detail::cat(stem, "_", entries_.size()); }
  // Adds a kernel to the program; add_run() gives it a run.
  void add_kernel(const cuda::KernelSource& k) {
    shim_.add(k);
    program_ += k.source;
    entries_.push_back(k.entry);
  }
  void add_run(std::string label, const cuda::KernelSource& k, std::vector<uint64_t> words, std::function<void()> verify) {
    runs_.push_back({std::move(label), k.entry, std::move(words), std::move(verify)});
  }
  void add(std::string label, const cuda::KernelSource& k, std::vector<uint64_t> words, std::function<void()> verify) {
    add_kernel(k);
    add_run(std::move(label), k, std::move(words), std::move(verify));
  }

  // Builds the shim once, then runs and checks every run.
  void run_all() {
    if (!built_) shim_.build();
    built_ = true;
    for (const Run& r : runs_) {
      INFO(r.label);
      shim_.run(r.entry, r.words);
      r.verify();
    }
  }

  // NVRTC compiles the program for each architecture: every kernel in ptxas' report, none spilling.
  void check_nvrtc(std::initializer_list<int> archs, const std::string& name) const {
    for (int arch : archs) {
      const cuda::CompiledProgram p = cuda::Nvrtc::get().compile(program_, name, arch);
      INFO("sm_", arch, ": ", p.log.substr(0, 2000));
      CHECK(p.is_cubin);
      CHECK(p.binary.substr(0, 4) == "\x7f" "ELF");
      CHECK(p.spill_store_bytes() == 0);
      for (const std::string& e : entries_)
        CHECK(p.log.find("Compiling entry function '" + e + "'") != std::string::npos);
    }
  }

  size_t runs() const { return runs_.size(); }

 private:
  HostShim shim_;
  bool built_ = false;
  std::string program_;
  std::vector<std::string> entries_;
  std::vector<Run> runs_;
};

}  // namespace kiln::test

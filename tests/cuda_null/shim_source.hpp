#pragma once
// The C++ that lets generated CUDA kernels compile for the host (used by the tests' host shim, host_shim.hpp, and
// by the emulated device's NVRTC, emulated/nvrtc.cpp): what CUDA provides (blockIdx, threadIdx, __global__,
// __shared__, __syncthreads, __shfl_xor_sync, the math functions' float overloads, the bit casts, atomicAdd, and
// the tensor cores' mma.sync and ldmatrix for kiln/cuda/mma.hpp), and the host entry
// point of a kernel, which runs every (block, thread) of a grid: one after another, or, for kernels that cooperate
// within a block (shared memory and __syncthreads), each block as that many host threads meeting at a barrier over
// one shared-memory array. Signed overflow must wrap (-fwrapv), as it does on the GPU. Plain C++: no kiln header.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>

namespace kiln::test {

inline constexpr const char* kHostShim = R"SHIM(#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
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
// A cooperating block: its threads, its barrier and its shared memory (one block runs at a time), and its warps
// (32 consecutive threads with a barrier of their own and room for what their lanes exchange).
alignas(16) unsigned char kiln_smem[256 * 1024];
static std::barrier<>* kiln_shim_block_barrier = nullptr;
inline void __syncthreads() { kiln_shim_block_barrier->arrive_and_wait(); }
struct kiln_shim_warp {
  std::barrier<> barrier;
  float value[32];
  unsigned a[32][4], b[32][2];
  const unsigned short* rows[32];
  explicit kiln_shim_warp(unsigned lanes) : barrier(lanes) {}
};
static std::vector<std::unique_ptr<kiln_shim_warp>> kiln_shim_warps;
inline kiln_shim_warp& kiln_shim_my_warp() { return *kiln_shim_warps[threadIdx.x / 32]; }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  kiln_shim_warp& w = kiln_shim_my_warp();
  const unsigned lane = threadIdx.x % 32;
  w.value[lane] = v;
  w.barrier.arrive_and_wait();
  const float other = w.value[lane ^ unsigned(lane_mask)];
  w.barrier.arrive_and_wait();
  return other;
}
// mma.sync.aligned.m16n8k16.row.col with float accumulators (the fragment layouts of kiln/cuda/mma.hpp): the
// lanes publish their fragments, then each computes its four elements of D in float, k in order.
inline void kiln_shim_mma(float* c, const unsigned* a, const unsigned* b, float (*to_float)(unsigned short)) {
  kiln_shim_warp& w = kiln_shim_my_warp();
  const unsigned lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) w.a[lane][i] = a[i];
  for (int i = 0; i < 2; ++i) w.b[lane][i] = b[i];
  w.barrier.arrive_and_wait();
  const auto half = [&](unsigned reg, unsigned k) { return to_float((unsigned short)(k % 2 ? reg >> 16 : reg & 0xffffu)); };
  for (unsigned e = 0; e < 4; ++e) {
    const unsigned row = g + 8 * (e / 2), col = 2 * t + e % 2;
    float sum = c[e];
    for (unsigned k = 0; k < 16; ++k)
      sum += half(w.a[(row % 8) * 4 + (k % 8) / 2][row / 8 + 2 * (k / 8)], k) * half(w.b[col * 4 + (k % 8) / 2][k / 8], k);
    c[e] = sum;
  }
  w.barrier.arrive_and_wait();
}
// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lanes 8j .. 8j + 7 give matrix j's rows (16-byte aligned, as the
// GPU requires); lane 4g + t gets row g's (with trans, column g's) elements 2t and 2t + 1 of each matrix.
inline void kiln_shim_ldmatrix(unsigned* r, const unsigned short* row, bool trans) {
  kiln_shim_warp& w = kiln_shim_my_warp();
  const unsigned lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if (reinterpret_cast<unsigned long>(row) % 16 != 0) {
    std::fprintf(stderr, "host shim: ldmatrix row address %p is not 16-byte aligned\n", static_cast<const void*>(row));
    std::abort();
  }
  w.rows[lane] = row;
  w.barrier.arrive_and_wait();
  for (unsigned j = 0; j < 4; ++j) {
    const unsigned short* const* m = w.rows + 8 * j;
    r[j] = trans ? unsigned(m[2 * t][g]) | unsigned(m[2 * t + 1][g]) << 16 : unsigned(m[g][2 * t]) | unsigned(m[g][2 * t + 1]) << 16;
  }
  w.barrier.arrive_and_wait();
}
// One host thread per thread of the block, kept for the whole grid (creating them per block cost more than most
// kernels): block b + 1 starts when every thread of block b is done, since the blocks share one shared memory.
template <class Kernel>
void kiln_shim_run_blocks(unsigned grid, unsigned block, Kernel kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  kiln_shim_warps.clear();
  for (unsigned w = 0; w < (block + 31) / 32; ++w)
    kiln_shim_warps.push_back(std::make_unique<kiln_shim_warp>(block - 32 * w < 32 ? block - 32 * w : 32));
  std::barrier<> barrier(block);
  kiln_shim_block_barrier = &barrier;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block; ++t)
    threads.emplace_back([=, &barrier] {
      threadIdx = {t, 0, 0};
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        kernel();
        barrier.arrive_and_wait();
      }
    });
  for (std::thread& th : threads) th.join();
}
template <class Kernel>
void kiln_shim_run_sequential(unsigned grid, unsigned block, Kernel kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned b = 0; b < grid; ++b)
    for (unsigned t = 0; t < block; ++t) {
      blockIdx = {b, 0, 0};
      threadIdx = {t, 0, 0};
      kernel();
    }
}
)SHIM";

// The host entry point `<entry>_host(const void* desc, unsigned grid, unsigned block)` of a kernel whose
// descriptor struct is `<entry>_desc`, passed by value (desc points at the block) or by pointer.
inline std::string host_entry(const std::string& entry, bool descriptor_by_pointer, bool cooperative) {
  const std::string desc = entry + "_desc";
  const std::string call = entry + (descriptor_by_pointer ? "(static_cast<const " + desc + "*>(desc))"
                                                          : "(*static_cast<const " + desc + "*>(desc))");
  return "extern \"C\" void " + entry + "_host(const void* desc, unsigned grid, unsigned block) {\n  " +
         (cooperative ? "kiln_shim_run_blocks" : "kiln_shim_run_sequential") + "(grid, block, [=] { " + call +
         "; });\n}\n";
}

// The compiler and flags of every shim build ($CXX or c++); the precompiled shim is valid only for these.
inline std::string shim_compiler() {
  const char* cxx = std::getenv("CXX");
  return std::string(cxx && *cxx ? cxx : "c++") + " -std=c++20 -O1 -fwrapv -fPIC -pthread -w";
}

// A directory holding kiln_shim.hpp (kHostShim) and, where the compiler makes one, its precompiled form
// kiln_shim.hpp.gch: parsing the shim's standard headers took 0.6 s of each kernel's 0.7 s build, the precompiled
// header 0.1 s. Made once per shim and compiler in the temporary directory and kept there, shared by every
// process: each builds its own copy, then renames it into place unless another process was first. A compiler that
// cannot use the .gch (or a failed one) reads the header instead.
inline const std::filesystem::path& shim_header_dir() {
  static const std::filesystem::path dir = [] {
    namespace fs = std::filesystem;
    const std::string compiler = shim_compiler();
    const fs::path final_dir = fs::temp_directory_path() /
                               ("kiln-shim-" + std::to_string(std::hash<std::string>{}(compiler + kHostShim)));
    if (fs::exists(final_dir)) return final_dir;  // (renamed into place whole)
    const fs::path mine = final_dir.string() + ".tmp-" + std::to_string(::getpid());
    fs::create_directories(mine);
    std::ofstream(mine / "kiln_shim.hpp") << kHostShim;
    const std::string pch = compiler + " -x c++-header " + (mine / "kiln_shim.hpp").string() + " -o " +
                            (mine / "kiln_shim.hpp.gch").string() + " >/dev/null 2>&1";
    if (std::system(pch.c_str()) != 0) fs::remove(mine / "kiln_shim.hpp.gch");
    std::error_code ec;
    fs::rename(mine, final_dir, ec);  // fails when another process made it first: use theirs
    if (ec) fs::remove_all(mine, ec);
    return final_dir;
  }();
  return dir;
}

// Compiles `source` (generated kernels and their host entries) after the shim into the shared library `lib`, the
// compiler's messages into `log`; returns whether it compiled. The source's line numbers are its own.
inline bool compile_with_shim(const std::string& source, const std::filesystem::path& src,
                              const std::filesystem::path& lib, const std::filesystem::path& log) {
  std::ofstream(src) << "#include \"kiln_shim.hpp\"\n#line 1\n" << source;
  const std::string command = shim_compiler() + " -shared -I" + shim_header_dir().string() + " " + src.string() +
                              " -o " + lib.string() + " >" + log.string() + " 2>&1";
  return std::system(command.c_str()) == 0;
}

}  // namespace kiln::test

#pragma once
// Runs generated CUDA kernels on the host, so their meaning is checked without a GPU: the sources are compiled
// by the system's C++ compiler (c++, or $CXX) together with the shim of shim_source.hpp (what CUDA provides),
// loaded with dlopen, and each kernel is called once per (block, thread) of a small grid, which also walks its
// grid-stride loop; kernels that cooperate within a block (KernelSource::block_threads) run each block as that
// many host threads meeting at barriers.
#include <dlfcn.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/cuda/codegen.hpp"
#include "kiln/cuda/nvrtc.hpp"
#include "shim_source.hpp"

namespace kiln::test {

class HostShim {
 public:
  // Adds a kernel; call before build().
  void add(const cuda::KernelSource& k) {
    source_ += k.source;
    source_ += host_entry(k.entry, k.descriptor_by_pointer, k.block_threads > 0);
    if (k.block_threads > 0) block_threads_[k.entry] = unsigned(k.block_threads);
  }

  // Compiles everything added into a shared library and loads it.
  void build() {
    dir_ = std::filesystem::temp_directory_path() / kiln::detail::cat("kiln-host-shim-", ::getpid(), "-", this);
    std::filesystem::create_directories(dir_);
    const auto src = dir_ / "kernels.cpp", lib = dir_ / "kernels.so", log = dir_ / "compile.log";
    if (!compile_with_shim(source_, src, lib, log)) {
      std::ifstream in(log);
      throw std::runtime_error("host shim: compiling " + src.string() + " failed:\n" +
                               std::string(std::istreambuf_iterator<char>(in), {}));
    }
    handle_ = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error(std::string("host shim: dlopen: ") + ::dlerror());
  }

  // Runs kernel `entry` on a grid of `grid` x `block` threads with the descriptor block `words`.
  // (A cooperating kernel runs on blocks of its own block_threads.)
  void run(const std::string& entry, const std::vector<uint64_t>& words, unsigned grid = 3, unsigned block = 32) const {
    using Launch = void (*)(const void*, unsigned, unsigned);
    auto launch = reinterpret_cast<Launch>(::dlsym(handle_, (entry + "_host").c_str()));
    if (!launch) throw std::runtime_error("host shim: no kernel " + entry);
    const auto fixed = block_threads_.find(entry);
    launch(words.data(), grid, fixed == block_threads_.end() ? block : fixed->second);
  }

  ~HostShim() {
    if (handle_) ::dlclose(handle_);
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

 private:
  std::string source_;
  std::map<std::string, unsigned> block_threads_;
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

// The kernel cache (memory and disk), NVRTC's error reporting and the driver's device queries, without a GPU.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_null_kernel_cache {

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// A fresh cache directory, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / kiln::detail::cat("kiln-cache-test-", ::getpid(), "-", counter++);
    fs::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    if (fs::exists(path))
      for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path());
    return out;
  }
};

std::string source_of(float scale) {
  const Tensor<float> x = zeros<float>({4});
  return cuda::forward_kernel(exp(x) * scale, {}).source;  // the scale is a descriptor word: same source
}

std::string tanh_source() {
  const Tensor<float> x = zeros<float>({4});
  return cuda::forward_kernel(tanh(x), {}).source;
}

}  // namespace

TEST_CASE("the disk cache: a second process compiles nothing") {
  TempDir dir;
  {
    cuda::KernelCache cache(dir.path);
    const auto p = cache.compile_cached(source_of(2), "exp_scale", 90);
    CHECK(p->is_cubin);
    CHECK(cache.stats().compiles == 1);
    CHECK(dir.files().size() == 1);  // written atomically: no temporary left beside it
    // The same source (another scale) is the same kernel.
    const auto q = cache.compile_cached(source_of(3), "exp_scale", 90);
    CHECK(q->binary == p->binary);
    CHECK(cache.stats().compiles == 1);
    CHECK(cache.stats().disk_hits == 1);
  }
  cuda::KernelCache second(dir.path);  // a new process: nothing in memory
  const auto r = second.compile_cached(source_of(2), "exp_scale", 90);
  CHECK(second.stats().compiles == 0);
  CHECK(second.stats().disk_hits == 1);
  CHECK(r->arch == 90);
}

TEST_CASE("the cache key covers source, architecture, options and versions") {
  TempDir dir;
  cuda::KernelCache cache(dir.path);
  const std::string a = source_of(1), b = tanh_source();
  const auto key = [&](const std::string& s, int arch, std::vector<std::string> opts, int nvrtc) {
    return cache.file_for(cuda::KernelCache::disk_key(s, arch, opts, nvrtc));
  };
  CHECK(key(a, 90, {}, 13000) == key(a, 90, {}, 13000));
  CHECK(key(a, 90, {}, 13000) != key(b, 90, {}, 13000));
  CHECK(key(a, 90, {}, 13000) != key(a, 80, {}, 13000));
  CHECK(key(a, 90, {}, 13000) != key(a, 90, {"-lineinfo"}, 13000));
  CHECK(key(a, 90, {}, 13000) != key(a, 90, {}, 12080));
  CHECK(cuda::KernelCache::disk_key(a, 90, {}, 13000).find(KILN_VERSION_STRING) != std::string::npos);

  cache.compile_cached(a, "a", 80);
  cache.compile_cached(a, "a", 90);
  cache.compile_cached(b, "b", 90);
  CHECK(cache.stats().compiles == 3);
  CHECK(dir.files().size() == 3);
}

TEST_CASE("a corrupt, truncated or foreign cache file is ignored and rewritten") {
  TempDir dir;
  const std::string src = source_of(1);
  fs::path file;
  std::string good;
  {
    cuda::KernelCache cache(dir.path);
    good = cache.compile_cached(src, "k", 90)->binary;
    file = cache.file_for(cuda::KernelCache::disk_key(src, 90, {}, cuda::Nvrtc::get().version()));
    REQUIRE(fs::exists(file));
  }
  const auto damage = [&](auto&& edit) {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    in.close();
    edit(bytes);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  };
  const auto reload_compiles = [&] {
    cuda::KernelCache cache(dir.path);
    const auto p = cache.compile_cached(src, "k", 90);
    CHECK(p->binary == good);
    CHECK(cache.stats().disk_rejected == 1);
    CHECK(cache.stats().compiles == 1);
    cuda::KernelCache again(dir.path);  // the rewritten file is good again
    again.compile_cached(src, "k", 90);
    CHECK(again.stats().disk_hits == 1);
  };
  SUBCASE("a flipped byte in the binary") {
    damage([](std::string& b) { b[b.size() - 10] ^= 0x40; });
    reload_compiles();
  }
  SUBCASE("truncated") {
    damage([](std::string& b) { b.resize(b.size() / 2); });
    reload_compiles();
  }
  SUBCASE("empty") {
    damage([](std::string& b) { b.clear(); });
    reload_compiles();
  }
  SUBCASE("another key under this name (a hash collision)") {
    damage([](std::string& b) {
      const size_t pos = b.find("arch 90");
      REQUIRE(pos != std::string::npos);
      b[pos + 6] = '1';
    });
    reload_compiles();
  }
}

TEST_CASE("a failed compile throws NVRTC's log with the source line and caches nothing") {
  TempDir dir;
  cuda::KernelCache cache(dir.path);
  std::string src = tanh_source();
  src.insert(src.rfind("  }\n}"), "    undefined_function(i);\n");
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      cache.get("broken", 90, [&] { return std::pair{src, std::string("broken.cu")}; });
      FAIL("no exception");
    } catch (const cuda::NvrtcCompileError& e) {
      const std::string what = e.what();
      CHECK(what.find("broken.cu") != std::string::npos);
      CHECK(what.find("undefined_function") != std::string::npos);
      CHECK(what.find("source line") != std::string::npos);
      CHECK(e.source() == src);
    }
  }
  CHECK(cache.stats().compiles == 0);
  CHECK(dir.files().empty());
}

TEST_CASE("the memory cache is looked up by signature before any source is generated") {
  TempDir dir;
  cuda::KernelCache cache(dir.path);
  int generated = 0;
  const auto gen = [&] {
    ++generated;
    return std::pair{tanh_source(), std::string("tanh")};
  };
  const auto a = cache.get("tanh|dense_i32", 90, gen);
  const auto b = cache.get("tanh|dense_i32", 90, gen);
  CHECK(a == b);
  CHECK(generated == 1);
  CHECK(cache.stats().memory_hits == 1);
  cache.get("tanh|dense_i32", 80, gen);  // another architecture is another program
  CHECK(generated == 2);
  cache.clear_memory();
  cache.get("tanh|dense_i32", 90, gen);  // from disk now
  CHECK(generated == 3);
  CHECK(cache.stats().disk_hits == 1);
  CHECK(cache.stats().compiles == 2);
}

TEST_CASE("an unwritable cache directory costs the disk cache, not the kernel") {
  TempDir dir;
  fs::create_directories(dir.path.parent_path());
  std::ofstream(dir.path) << "a file where the directory should be";
  cuda::KernelCache cache(dir.path / "sub");
  const auto p = cache.compile_cached(tanh_source(), "tanh", 90);
  CHECK_FALSE(p->binary.empty());
  CHECK(cache.stats().disk_write_failures == 1);
  fs::remove(dir.path);
}

TEST_CASE("an architecture NVRTC has no cubin for falls back to PTX") {
  // sm_52 and older are gone from recent NVRTCs; 1000 is beyond every one.
  const cuda::CompiledProgram p = cuda::Nvrtc::get().compile(tanh_source(), "tanh.cu", 1000);
  CHECK_FALSE(p.is_cubin);
  CHECK(p.arch < 1000);
  CHECK(p.binary.find(".entry kiln_forward") != std::string::npos);
}

TEST_CASE("a missing library is a clear error; without a driver or device there is no CUDA") {
  CHECK_THROWS_WITH_AS(cuda::DynamicLibrary("libkiln-nothing", {"libkiln-does-not-exist.so"}),
                       doctest::Contains("cannot load libkiln-nothing; tried:\n  libkiln-does-not-exist.so"),
                       cuda::CudaUnavailableError);
  CHECK(cuda::is_available() == (cuda::device_count() > 0));
  if (cuda::device_count() == 0) {
    // Either libcuda is missing (CI) or it found no device: both are an exception naming the cause when the
    // driver is asked for, never a crash.
    std::string cause = "a driver without devices";
    int count = -1;
    try {
      count = cuda::Driver::get().device_count();
    } catch (const cuda::CudaUnavailableError& e) {
      cause = e.what();
      count = 0;
      CHECK(cause.find("libcuda") != std::string::npos);
    }
    CHECK(count == 0);
    MESSAGE("no CUDA device here: ", cause);
  } else {
    for (int d = 0; d < cuda::device_count(); ++d) CHECK(cuda::Driver::get().arch(d) >= 50);
    CHECK_THROWS_AS(cuda::Driver::get().arch(cuda::device_count()), std::out_of_range);
  }
}

}  // namespace test_cuda_null_kernel_cache

// kiln's CUDA runtime (cuda/runtime.hpp: device memory, the caching allocator over it, module loading through the
// kernel cache, launches) and CUDA tensors end to end: data copied to the device, generated kernels launched on it,
// results copied back and compared with the CPU. In CI on the emulated device (emulated/driver.cpp and
// emulated/nvrtc.cpp, loaded through KILN_CUDA_DRIVER_LIBRARY and KILN_NVRTC_LIBRARY, which tests/meson.build sets
// for this executable); on a GPU with the real driver and NVRTC (tests/gpu/run.sh).
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <sstream>
#include <thread>

#include "kiln/attention.hpp"
#include "kiln/attention/flex_cuda.hpp"
#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "kiln/eigen.hpp"

#include "compare.hpp"
#include "device_kind.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_emulated_device {

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::emulated_driver;
namespace at = kiln::attention;

namespace {

// Every run starts with an empty kernel cache of its own (set before the process-wide cache is first made).
const bool fresh_cache = [] {
  const auto dir = std::filesystem::temp_directory_path() / kiln::detail::cat("kiln-emulated-cache-", ::getpid());
  std::filesystem::remove_all(dir);
  ::setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  return true;
}();

cuda::DeviceContext& device() { return cuda::DeviceContext::get(0); }
// Each case is skipped (and reported so) where there is no CUDA device, emulated or real.
auto no_device() { return doctest::skip(!cuda::is_available()); }


// A tensor's address on the device, for the kernels' descriptors (CPU code never reads a CUDA tensor's memory).
template <Dtype T>
T* on_device(const Tensor<T>& t) {
  return reinterpret_cast<T*>(t.impl().device_bytes());
}

}  // namespace

TEST_CASE("the device: the emulated one is one device of compute capability 9.0" * no_device()) {
  REQUIRE(cuda::is_available());
  CHECK(device().name() == "cuda:0");
  CHECK_THROWS_AS(cuda::DeviceContext::get(cuda::device_count()), std::out_of_range);
  MESSAGE("cuda:0 is sm_", device().arch(), " of ", cuda::device_count(), " devices, driver ", cuda::Driver::get().version());
  if (emulated_driver()) {
    CHECK(cuda::device_count() == 1);
    CHECK(device().arch() == 90);
  } else {
    CHECK(device().arch() >= 70);
  }
}

TEST_CASE("device memory: copies both ways, zero fill, the caching allocator's reuse, out of memory" * no_device()) {
  Generator g(1);
  const Tensor<float> x = randn<float>({1000}, &g);
  cuda::CachingAllocator& alloc = device().allocator();
  const auto before = alloc.stats();
  {
    const Tensor<float> d = x.cuda();
    expect_close(d.cpu(), x, 0, "round trip");
    device().fill_zero(on_device(d) + 10, 20 * sizeof(float));
    device().copy_on_device(on_device(d) + 900, on_device(d), 50 * sizeof(float));
    const Tensor<float> back = d.cpu();
    for (int64_t i = 0; i < 1000; ++i) {
      const int64_t from = i >= 900 && i < 950 ? i - 900 : i;
      CHECK(back.data_ptr()[i] == (from >= 10 && from < 30 ? 0.0f : x.data_ptr()[from]));
    }
  }
  // The block went back to the cache; the same size again is served from it, without the driver.
  { const Tensor<float> d = x.cuda(); }
  const auto after = alloc.stats();
  CHECK(after.device_allocations - before.device_allocations <= 1);
  CHECK(after.cache_hits - before.cache_hits >= 1);

  // A budget of 1 MiB: 2 MiB frees the cache, retries, then throws naming the device and the request.
  if (!emulated_driver()) return;  // (a GPU's memory is what it is)
  ::setenv("KILN_EMULATED_DEVICE_BYTES", "1048576", 1);
  CHECK_THROWS_WITH_AS(alloc.allocate(size_t(2) << 20), doctest::Contains("out of memory on cuda:0: 2097152 bytes"),
                       OutOfMemoryError);
  ::unsetenv("KILN_EMULATED_DEVICE_BYTES");
  CHECK(alloc.stats().oom_retries == after.oom_retries + 1);
}

TEST_CASE("an expression's forward and backward kernels launch through the kernel cache and the driver" * no_device()) {
  Generator g(2);
  const Tensor<float> a = randn<float>({5, 61}, &g), b = randn<float>({5, 61}, &g), c = randn<float>({5, 61}, &g),
                      up = randn<float>({5, 61}, &g);
  const Tensor<float> da = a.cuda(), db = b.cuda(), dc = c.cuda(), dup = up.cuda();
  const auto e = da * db + sin(dc) * 0.5f;
  const Tensor<float> want = a * b + sin(c) * 0.5f;
  const Tensor<float> out = zeros<float>({5, 61}).cuda();
  const cuda::KernelSource fk = cuda::forward_kernel(e, cuda::choose_variant(e, e.shape(), out.strides()), "emulated_forward");
  const auto words = cuda::detail::descriptor(fk, e.shape(), {{on_device(out), out.strides()}}, {}, e);
  const auto compiles = cuda::kernel_cache().stats().compiles;
  device().launch(fk, words, {.grid = 2, .block = 64});
  expect_close(out.cpu(), want, 1e-6, "a * b + sin(c) * 0.5");
  CHECK(cuda::kernel_cache().stats().compiles == compiles + 1);

  // Again: no compile, no new module.
  const size_t modules = device().modules_loaded();
  device().fill_zero(on_device(out), 5 * 61 * sizeof(float));
  device().launch(fk, words, {.grid = 3, .block = 32});
  expect_close(out.cpu(), want, 1e-6, "second launch");
  CHECK(cuda::kernel_cache().stats().compiles == compiles + 1);
  CHECK(device().modules_loaded() == modules);

  // The fused backward: every leaf's gradient in one pass.
  const cuda::KernelSource bk = cuda::backward_kernel(e, cuda::choose_variant(e, e.shape(), out.strides()), "emulated_backward");
  const Tensor<float> ga = zeros<float>({5, 61}).cuda(), gb = zeros<float>({5, 61}).cuda(), gc = zeros<float>({5, 61}).cuda();
  const auto bwords = cuda::detail::descriptor(
      bk, e.shape(), {{on_device(ga), ga.strides()}, {on_device(gb), gb.strides()}, {on_device(gc), gc.strides()}},
      {{on_device(dup), dup.strides()}}, e);
  device().launch(bk, bwords, {.grid = 2, .block = 64});
  expect_close(ga.cpu(), Tensor<float>(up * b), 1e-6, "d/da");
  expect_close(gb.cpu(), Tensor<float>(up * a), 1e-6, "d/db");
  expect_close(gc.cpu(), Tensor<float>(up * cos(c) * 0.5f), 1e-6, "d/dc");
}

TEST_CASE("a descriptor past the parameter limit goes to the device and is freed at synchronize" * no_device()) {
  std::vector<Tensor<float>> host, dev;
  Generator g(3);
  for (int i = 0; i < 64; ++i) {  // rank 8, each leaf broadcast along other dims: the strided loop's block is 4.7 KB
    Shape s = Shape::filled(8, 1);
    s[i % 8] = 2;
    s[(i + 3) % 8] = 2;
    host.push_back(randn<float>(s, &g));
    dev.push_back(host.back().cuda());
  }
  const auto e = [&]<size_t... I>(std::index_sequence<I...>) {
    return (... + (Leaf<float>(dev[I].impl_ptr()) * float(I + 1)));
  }(std::make_index_sequence<64>{});
  const Tensor<float> out = zeros<float>(Shape::filled(8, 2)).cuda();
  const cuda::KernelSource k = cuda::forward_kernel(e, cuda::choose_variant(e, e.shape(), out.strides()), "emulated_many");
  REQUIRE(k.descriptor_by_pointer);
  const auto words = cuda::detail::descriptor(k, e.shape(), {{on_device(out), out.strides()}}, {}, e);
  const int64_t live = device().allocator().memory_allocated();
  device().launch(k, words, {.grid = 1, .block = 32});
  CHECK(device().allocator().memory_allocated() > live);  // the block's device copy, until the launch is done
  Tensor<double> want = zeros<double>(Shape::filled(8, 2));
  for (int i = 0; i < 64; ++i) want = want + host[size_t(i)].to<double>() * double(i + 1);
  expect_close(out.cpu().to<double>(), want, 1e-4, "64 leaves");  // (float sums of 64 terms; cpu() synchronizes)
  CHECK(device().allocator().memory_allocated() == live);
}

TEST_CASE("flex_attention's kernels on the device at a GPU's tile shape equal the CPU's" * no_device()) {
  // D = 64 with 64 x 64 tiles and 4 threads per row: 256 threads and more than 48 KiB of shared memory per block,
  // so the launch must raise the kernel's shared-memory limit (the emulated driver refuses it otherwise).
  constexpr int64_t B = 1, H = 2, L = 80, D = 64;
  Generator g(4);
  Tensor<float> q = randn<float>({B, H, L, D}, &g), k = randn<float>({B, H, L, D}, &g), v = randn<float>({B, H, L, D}, &g);
  const Tensor<float> dout = randn<float>({B, H, L, D}, &g);
  Tensor<float> table = randn<float>({H, 2 * L - 1}, &g);
  const auto bm = at::create_block_mask(at::causal(), 1, 1, L, L, 128, 128);
  for (Tensor<float>* t : {&q, &k, &v, &table}) t->requires_grad_();
  const auto mod = at::relative_position_bias(table, L);
  const auto ref = at::flex_attention_with_lse(q, k, v, mod, bm);
  sum(ref.output * dout).backward();

  // Everything the kernels read lives on the device, the captured table and the block mask's states too.
  const Tensor<float> dq_in = q.detach().cuda(), dk_in = k.detach().cuda(), dv_in = v.detach().cuda(),
                      ddout = dout.cuda(), dtable = table.detach().cuda();
  const std::shared_ptr<void> dstates(device().allocator().allocate(bm.state.size()), [](void* p) { device().allocator().free(p); });
  static_assert(sizeof(at::BlockState) == 1);
  device().copy_to_device(dstates.get(), bm.state.data(), bm.state.size());
  const auto dmod = at::relative_position_bias(dtable, L);
  const Tensor<float> out = zeros<float>({B, H, L, D}).cuda(), lse = zeros<float>({B, H, L}).cuda(),
                      delta = zeros<float>({B, H, L}).cuda(), dq = zeros<float>({B, H, L, D}).cuda(),
                      dk = zeros<float>({B, H, L, D}).cuda(), dv = zeros<float>({B, H, L, D}).cuda(),
                      dbias = zeros<float>(table.shape()).cuda();
  const Tensor<int> error = zeros<int>({1}).cuda();

  at::FlexBuffers<float> x;
  x.B = B, x.Hq = H, x.Hkv = H, x.Lq = L, x.Lkv = L;
  const auto rows = [](const Tensor<float>& t) { return at::FlexBuffers<float>::Rows{on_device(t), t.stride(0), t.stride(1), t.stride(2)}; };
  x.q = rows(dq_in), x.k = rows(dk_in), x.v = rows(dv_in), x.dout = rows(ddout);
  x.out = on_device(out), x.lse = on_device(lse), x.delta = on_device(delta);
  x.dq_acc = on_device(dq), x.dq = on_device(dq), x.dk = on_device(dk), x.dv = on_device(dv);  // (float: dq is the accumulator)
  x.scale = 1 / std::sqrt(double(D));
  x.error = on_device(error);
  x.captured_grads = {{dtable.impl_ptr().get(), on_device(dbias)}};
  const at::FlexKernelConfig cfg{.D = D, .Dv = D, .block_q = 64, .block_kv = 64, .threads_per_row = 4, .entry = "emulated_flex"};
  const at::FlexKernels ks = at::flex_kernels<float>(dmod, bm, cfg);
  REQUIRE(ks.forward.shared_bytes > 48 * 1024);
  const auto words = at::flex_descriptor(ks, x, dmod, bm, dstates.get(), cfg);
  device().launch(ks.forward, words, {.grid = 4, .block = unsigned(cfg.forward_threads())});
  device().launch(ks.delta, words, {.grid = 2, .block = 64});
  device().launch(ks.backward, words, {.grid = 4, .block = unsigned(cfg.backward_threads())});

  CHECK(error.cpu().data_ptr()[0] == 0);
  constexpr double kTol = 2e-5;
  expect_close(out.cpu(), ref.output.detach(), kTol, "output");
  expect_close(lse.cpu(), ref.lse.detach(), kTol, "lse");
  expect_close(dq.cpu(), q.grad(), kTol, "dq");
  expect_close(dk.cpu(), k.grad(), kTol, "dk");
  expect_close(dv.cpu(), v.grad(), kTol, "dv");
  expect_close(dbias.cpu(), table.grad(), kTol, "captured bias gradient");

  // A cooperating kernel launched on blocks of another size is refused before the driver sees it.
  CHECK_THROWS_WITH_AS(device().launch(ks.forward, words, {.grid = 1, .block = 128}),
                       doctest::Contains("the kernel needs blocks of 256"), std::invalid_argument);
}

TEST_CASE("CUDA tensors on the device: cuda(), to(Device), cpu(), views, and CPU ops refused" * no_device()) {
  Generator g(5);
  const Tensor<float> x = randn<float>({3, 4, 5}, &g);
  const int64_t before = device().allocator().memory_allocated();
  {
    const Tensor<float> c = x.cuda();
    CHECK(c.is_cuda());
    CHECK(!c.is_cpu());
    CHECK(c.device() == Device(kCUDA, 0));
    CHECK(c.device().str() == "cuda:0");
    CHECK(device().allocator().memory_allocated() >= before + int64_t(sizeof(float)) * 60);
    expect_close(c.cpu(), x, 0, "round trip");
    CHECK(c.to(Device(kCUDA)).is_same(c));  // already there
    CHECK(x.to(Device(kCUDA)).device() == c.device());
    // A view of a CUDA tensor comes back with its layout.
    expect_close(c.permute({2, 0, 1}).slice(1, 1, 3).cpu(), x.permute({2, 0, 1}).slice(1, 1, 3).contiguous(), 0, "view");
    // CPU code never reads device memory: an op without a CUDA path says so.
    const std::vector<std::function<void()>> cpu_ops = {[&] { (void)as_eigen(c.select(0, 1)); },
                                                         [&] { (void)as_eigen_array(c.select(0, 0)); }};
    for (const auto& op : cpu_ops)
      CHECK_THROWS_WITH_AS(op(), doctest::Contains("on cuda:0 reached code that runs on the CPU: this op has no CUDA path yet"),
                           std::runtime_error);
    // The copy is differentiable: the gradient comes back to the host tensor.
    Tensor<float> w = x.clone();
    w.requires_grad_();
    sum(w.cuda() * 3.0f).backward();
    CHECK(!w.grad().is_cuda());
    CHECK(w.grad().to_vector() == std::vector<float>(60, 3.0f));
    CHECK(c.to_vector() == x.contiguous().to_vector());
  }
  CHECK(device().allocator().memory_allocated() == before);  // back in the cache
  const Tensor<int64_t> i = arange<int64_t>(0, 10);
  CHECK(i.cuda().cpu().to_vector() == i.to_vector());
  const Tensor<bfloat16> h = x.to<bfloat16>();
  CHECK(h.cuda().cpu().to<float>().to_vector() == h.to<float>().to_vector());
  CHECK(zeros<float>({0, 3}).cuda().cpu().numel() == 0);
}

TEST_CASE("elementwise expressions, reductions, softmax, writes, eval_all of CUDA tensors run on their device (KILN_WITH_CUDA)" * no_device()) {
  Generator g(6);
  const Tensor<float> a = randn<float>({37, 41}, &g), b = randn<float>({37, 41}, &g), bias = randn<float>({41}, &g);
  const Tensor<float> ca = a.cuda(), cb = b.cuda(), cbias = bias.cuda();
  const auto compiles = cuda::kernel_cache().stats().compiles;
  for (float s : {1.0f, -2.5f}) {  // the second value reuses the first's kernel (scalars are descriptor words)
    const Tensor<float> y = ca * cb + tanh(ca) * s;
    CHECK(y.is_cuda());
    expect_close(y.cpu(), Tensor<float>(a * b + tanh(a) * s), 1e-6, "a * b + tanh(a) * s");
  }
  CHECK(cuda::kernel_cache().stats().compiles == compiles + 1);
  // Broadcasting and a transposed operand (the strided loop), a comparison cast to float, int64, a clone.
  expect_close(Tensor<float>(ca.t() + cbias.unsqueeze(1)).cpu(), Tensor<float>(a.t() + bias.unsqueeze(1)), 0, "broadcast");
  expect_close(Tensor<float>((ca > cb).to<float>()).cpu(), Tensor<float>((a > b).to<float>()), 0, "comparison");
  const Tensor<int64_t> i = arange<int64_t>(0, 100);
  CHECK(Tensor<int64_t>(i.cuda() * int64_t(3) - int64_t(7)).cpu().to_vector() == Tensor<int64_t>(i * int64_t(3) - int64_t(7)).to_vector());
  expect_close(ca.clone().cpu(), a, 0, "clone");
  CHECK(Tensor<float>(zeros<float>({0, 4}).cuda() + 1.0f).is_cuda());
  // Reductions of an expression along dims, on the device without materializing it (sums accumulate in double).
  expect_close(sum(ca * cb).cpu(), sum(a * b), 1e-6, "sum of everything");
  expect_close(sum(ca * cb + 1.0f, {1}, true).cpu(), sum(a * b + 1.0f, {1}, true), 1e-6, "sum along dim 1, keepdim");
  expect_close(mean(ca.t(), {1}).cpu(), mean(a.t(), {1}), 1e-6, "mean of a transposed tensor");
  expect_close(amax(ca - cb, {0}).cpu(), amax(a - b, {0}), 0, "amax");
  expect_close(amin(ca, {0, 1}).cpu(), amin(a, {0, 1}), 0, "amin");
  CHECK(sum(i.cuda()).cpu().item() == sum(i).item());  // int64 sums in int64
  CHECK(argmax(ca, 1).cpu().to_vector() == argmax(a, 1).to_vector());
  CHECK(argmin(ca - cb, 0, true).cpu().to_vector() == argmin(a - b, 0, true).to_vector());
  CHECK(argmax(cbias).cpu().item() == argmax(bias).item());  // a 1-d tensor: its one dim
  CHECK_THROWS_WITH_AS(argmax(ca), doctest::Contains("argmax: over 2 dims of a CUDA tensor of shape [37, 41]"),
                       std::invalid_argument);
  expect_close(softmax(ca, 1).cpu(), softmax(a, 1), 1e-6, "softmax along dim 1");
  expect_close(log_softmax(ca * 2.0f, 0).cpu(), log_softmax(a * 2.0f, 0), 1e-6, "log_softmax of an expression along dim 0");
  // Writes into CUDA tensors: fill_, +=, a broadcast copy_ into a transposed view, a slice's assignment, and
  // copy_ between the host and the device both ways (as torch's).
  Tensor<float> dst = zeros<float>({41, 37}).cuda();
  dst.fill_(2.0f);
  dst += ca.t();
  expect_close(dst.cpu(), Tensor<float>(a.t() + 2.0f), 1e-6, "fill_ then +=");
  dst.t().copy_(cbias);  // [37, 41] <- [41], through the transpose's strides
  expect_close(dst.cpu(), Tensor<float>(bias.unsqueeze(1).expand({41, 37})), 0, "broadcast copy_ into a transposed view");
  dst.slice(0, 3, 5) = cb.t().slice(0, 0, 2) * 2.0f;
  Tensor<float> want_dst = bias.unsqueeze(1).expand({41, 37}).contiguous();
  want_dst.slice(0, 3, 5) = b.t().slice(0, 0, 2) * 2.0f;
  expect_close(dst.cpu(), want_dst, 1e-6, "a slice's assignment");
  dst.copy_(a.t());  // host -> device
  expect_close(dst.cpu(), a.t().contiguous(), 0, "copy_ from the host");
  Tensor<float> host = zeros<float>({37, 41});
  host.copy_(cb * 1.0f);  // device -> host
  expect_close(host, b, 0, "copy_ to the host");
  // eval_all: Adam's moments and parameter update in one kernel, the outputs also read (as kiln's Adam does).
  {
    Tensor<float> p = a.clone(), m = zeros<float>({37, 41}), v = full<float>({37, 41}, 0.5f);
    Tensor<float> cp = p.cuda(), cm = m.cuda(), cv = v.cuda();
    const auto update = [](Tensor<float>& p, Tensor<float>& m, Tensor<float>& v, const Tensor<float>& g) {
      eval_all({&m, &v, &p}, 0.9f * m + 0.1f * g, 0.999f * v + 0.001f * g * g,
               p - 0.01f * (0.9f * m + 0.1f * g) / (sqrt(0.999f * v + 0.001f * g * g) + 1e-8f));
    };
    update(p, m, v, b);
    update(cp, cm, cv, cb);
    expect_close(cp.cpu(), p, 1e-6, "eval_all: p");
    expect_close(cm.cpu(), m, 1e-6, "eval_all: m");
    expect_close(cv.cpu(), v, 1e-6, "eval_all: v");
    CHECK_THROWS_WITH_AS(update(cp, cm, cv, b), doctest::Contains("an expression mixes tensors on cuda:0 and cpu"),
                         std::invalid_argument);
    Tensor<float> host_out = zeros<float>({37, 41});
    CHECK_THROWS_WITH_AS(eval_all({&cp, &host_out}, cb * 1.0f, cb * 2.0f), doctest::Contains("eval_all: outputs on cuda:0 and cpu"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(eval_all({&cp}, b * 1.0f), doctest::Contains("eval_all: an expression on cpu for outputs on cuda:0"),
                         std::invalid_argument);
  }
  // torch.cuda's statistics and cache control.
  cuda::synchronize();
  CHECK(cuda::memory_allocated() == device().allocator().memory_allocated());
  CHECK(cuda::max_memory_allocated() >= cuda::memory_allocated());
  CHECK(cuda::memory_reserved() >= cuda::memory_allocated());
  cuda::empty_cache();
  CHECK(cuda::memory_reserved() == cuda::memory_allocated());
  cuda::reset_peak_memory_stats();
  CHECK(cuda::max_memory_allocated() == cuda::memory_allocated());
  // Tensors on two devices are refused with the reason (autograd: test_emulated_autograd.cpp).
  CHECK_THROWS_WITH_AS(Tensor<float>(ca + b), doctest::Contains("an expression mixes tensors on cuda:0 and cpu"), std::invalid_argument);
}

}  // namespace test_cuda_emulated_device

namespace test_cuda_emulated_device {

TEST_CASE("streams: a guard makes a pool stream current for launches, allocations and cuBLAS, then restores it" * no_device()) {
  const Device cuda0(kCUDA, 0);
  // The emulated driver and cuBLAS say what ran on each stream (on a GPU: -1 and the stream expected).
  const auto launches_on = [](const cuda::CUDAStream& s) {
    return emulated_driver() ? cuda::Driver::get().symbol<long long (*)(void*)>("kiln_emulated_launches_on")(s.stream()) : -1;
  };
  const auto last_gemm_stream = [](const cuda::CUDAStream& expected) {
    return emulated_driver() ? cuda::Cublas::get().symbol<void* (*)()>("kiln_emulated_cublas_last_stream")() : expected.stream();
  };
  const cuda::CUDAStream main = cuda::getCurrentCUDAStream();
  CHECK(main == cuda::getDefaultCUDAStream());
  CHECK(main.id() == 0);
  const cuda::CUDAStream side = cuda::getStreamFromPool();
  CHECK(side.id() != 0);
  CHECK(cuda::getStreamFromPool() != side);  // (round-robin over the pool)
  const Tensor<float> x = arange<float>(0, 1024).cuda();
  const long long on_main = launches_on(main), on_side = launches_on(side);
  Tensor<float> y, product;
  {
    cuda::CUDAStreamGuard guard(side);
    CHECK(cuda::getCurrentCUDAStream() == side);
    CHECK(guard.original_stream() == main);
    y = Tensor<float>(exp(x * 0.001f) * 2.0f);
    product = matmul(y.view({32, 32}), y.view({32, 32}));
    CHECK(last_gemm_stream(side) == side.stream());
  }
  CHECK(cuda::getCurrentCUDAStream() == main);
  if (emulated_driver()) {
    CHECK(launches_on(side) > on_side);
    CHECK(launches_on(main) == on_main);
  }
  main.wait_stream(side);
  side.synchronize();
  CHECK(side.query());
  expect_close(y.cpu(), Tensor<float>(exp(arange<float>(0, 1024) * 0.001f) * 2.0f), 1e-6, "y, computed on the side stream");
  (void)matmul(x.view({32, 32}), x.view({32, 32}));
  CHECK(last_gemm_stream(main) == nullptr);  // back on the default stream
  // y's block went back to the side stream's bin: the default stream does not take it, the side stream does.
  const void* block = y.impl().storage->data();
  y = Tensor<float>();
  const Tensor<float> on_default = empty<float>({1024}, cuda0);
  CHECK(on_default.impl().storage->data() != block);
  {
    cuda::CUDAStreamGuard guard(side);
    const Tensor<float> again = empty<float>({1024}, cuda0);
    CHECK(again.impl().storage->data() == block);
    cuda::record_stream(again, main);  // (freed, it waits for the default stream before the side stream reuses it)
  }
  CHECK_THROWS_WITH_AS(cuda::record_stream(zeros<float>({2}), side),
                       "record_stream: a tensor on cpu and a stream of cuda:0", std::invalid_argument);
  // setCurrentCUDAStream lasts until changed; another thread has its own current stream.
  cuda::setCurrentCUDAStream(side);
  std::thread([&] { CHECK(cuda::getCurrentCUDAStream() == main); }).join();
  CHECK(cuda::getCurrentCUDAStream() == side);
  cuda::setCurrentCUDAStream(main);
}

}  // namespace test_cuda_emulated_device

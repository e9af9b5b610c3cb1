// The CUDA backend's figures on a GPU (issue 5 item 8, issue 6 item 8), for tests/gpu/run.sh: each a median over
// repetitions timed on the host around a synchronize (launches of a millisecond and more), printed as lines
// "name: value unit (detail)". Without a device it says so and measures nothing. KILN_GPU_BENCH_SMOKE=1 shrinks
// every size (so the program can be tried on the emulated device; its figures then mean nothing).
//   - device copy bandwidth (cuMemcpyDtoD of 1 GiB, read + write counted): the baseline of the elementwise lines;
//   - the foundation's two fused expressions at 256M floats (a x + b y + z; tanh(x) exp(-y^2) + z) as generated
//     kernels, GB/s and the fraction of the copy bandwidth (target at least 0.9);
//   - sum along the last dim of [16384, 16384] and softmax of it, by a warp per row and by a thread per row;
//   - NVRTC's first compile of a kernel, and loading it again from the disk cache in a fresh cache object
//     (target: a hit under 1 ms); the host time per launch of a small kernel (target under 10 us);
//   - flex_attention's kernels launched directly, forward and backward, B = 1, H = 8, dense and causal, TFLOP/s
//     counting 4 L^2 D per head forward (dense; causal: half): float on CUDA cores at D = 64, L = 4096 with the
//     materialized softmax(q k^T) v forward (cuBLAS, kiln's softmax) in the same run, and bfloat16 at D = 128,
//     L = 8192 on CUDA cores and on tensor cores; and bfloat16 through the public API at D = 128, L = 8192, forward
//     and forward + backward, against the materialized forward;
//   - sgemm 4096 x 4096 x 4096 (float32, TF32 off) through kiln's matmul of CUDA tensors and through cublasSgemm
//     called directly in the same run: kiln's overhead as a ratio (target under 5%);
//   - the Fashion-MNIST CNN's convolutions and a BatchNorm2d, forward + backward at batch 256, through cuDNN and
//     through kiln's own kernels in the same run.
// Built with KILN_WITH_CUDA (tests/gpu/build.sh, bench/meson.build), so matmul of CUDA tensors runs on the device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <vector>

#include "kiln/attention.hpp"
#include "kiln/attention/flex_cuda.hpp"
#include "kiln/cuda.hpp"
#include "kiln/cuda/reduction.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

cuda::DeviceContext& device() { return cuda::DeviceContext::get(0); }

// Sizes are divided by this (KILN_GPU_BENCH_SMOKE).
int64_t shrink(int64_t full, int64_t smoke) {
  static const bool small = [] {
    const char* s = std::getenv("KILN_GPU_BENCH_SMOKE");
    return s && *s && *s != '0';
  }();
  return small ? smoke : full;
}

// Median seconds of f() over reps runs after one warm-up, each ended by a synchronize.
double median_seconds(int reps, const std::function<void()>& f) {
  f();
  device().synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    device().synchronize();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <Dtype T>
T* on_device(const Tensor<T>& t) {
  return reinterpret_cast<T*>(t.impl().device_bytes());
}

// An expression's dense forward kernel into out, on a grid of 4 blocks per 1024 elements up to 8192 blocks.
template <Expression E>
std::function<void()> expression_launch(const E& e, const Tensor<float>& out, const std::string& entry) {
  const cuda::KernelSource k = cuda::forward_kernel(e, cuda::choose_variant(e, e.shape(), out.strides()), entry);
  const auto words = cuda::detail::descriptor(k, e.shape(), {{on_device(out), out.strides()}}, {}, e);
  const unsigned grid = unsigned(std::clamp<int64_t>(out.numel() / 1024, 1, 8192));
  return [k, words, grid] { device().launch(k, words, {.grid = grid, .block = 256}); };
}

void elementwise(double copy_gbs) {
  const int64_t n = shrink(int64_t(1) << 28, 1 << 16);  // 256M floats
  const Tensor<float> x = full<float>({n}, 0.5f).cuda(), y = full<float>({n}, 0.25f).cuda(),
                      z = full<float>({n}, 0.125f).cuda(), out = zeros<float>({n}).cuda();
  const double bytes = 4.0 * double(n) * 4;  // three reads and a write
  const auto axpby = expression_launch(1.5f * x + -0.75f * y + z, out, "bench_axpby");
  const double t1 = median_seconds(10, axpby);
  std::printf("axpby (a x + b y + z, 256M floats): %.1f GB/s (%.2f of the copy bandwidth)\n", bytes / t1 / 1e9,
              bytes / t1 / 1e9 / copy_gbs);
  const auto tanh_exp = expression_launch(tanh(x) * exp(-(y * y)) + z, out, "bench_tanh_exp");
  const double t2 = median_seconds(10, tanh_exp);
  std::printf("tanh_exp (tanh(x) exp(-y^2) + z, 256M floats): %.1f GB/s (%.2f of the copy bandwidth)\n",
              bytes / t2 / 1e9, bytes / t2 / 1e9 / copy_gbs);
}

// Sum and softmax along the last dim of [16384, 16384], by a warp per row (what kiln picks for the shape) and by a
// thread per row (kiln's kernel for a kept innermost dim), each launched as kiln launches it.
void reductions(double copy_gbs) {
  const int64_t rows = shrink(16384, 256), cols = rows;
  const Tensor<float> x = full<float>({rows, cols}, 0.5f).cuda(), sums = zeros<float>({rows}).cuda(),
                      soft = zeros<float>({rows, cols}).cuda();
  const auto e = Leaf<float>(x.impl_ptr());
  const double read = 4.0 * double(rows * cols);
  for (const bool warps : {true, false}) {
    cuda::ReductionVariant v = cuda::reduction_variant(x.shape(), {1}, e);
    v.warp_rows = warps;
    const char* how = warps ? "a warp per row" : "a thread per row";
    const cuda::KernelSource ks = cuda::reduction_kernel<cuda::Reduce::Sum>(e, v, warps ? "bench_sum_w" : "bench_sum");
    const auto ws = cuda::reduction_descriptor(e, ks, x.shape(), {1}, {on_device(sums), sums.strides()});
    const double ts = median_seconds(5, [&] { device().launch(ks, ws, kiln::detail::launch_for_rows(ks, rows)); });
    std::printf("sum over the last dim of [16384, 16384], %s: %.1f GB/s (%.2f of the copy bandwidth)\n", how,
                read / ts / 1e9, read / ts / 1e9 / copy_gbs);
    const cuda::KernelSource kf = cuda::softmax_kernel<false>(e, v, warps ? "bench_softmax_w" : "bench_softmax");
    const auto wf = cuda::reduction_descriptor(e, kf, x.shape(), {1}, {on_device(soft), soft.strides()});
    const double tf = median_seconds(5, [&] { device().launch(kf, wf, kiln::detail::launch_for_rows(kf, rows)); });
    std::printf("softmax over the last dim of [16384, 16384], %s: %.1f GB/s counting one read and one write (%.2f of "
                "the copy bandwidth; it reads the row twice)\n", how, 2 * read / tf / 1e9, 2 * read / tf / 1e9 / copy_gbs);
  }
}

void compile_and_launch_overhead() {
  const auto dir = std::filesystem::temp_directory_path() / "kiln-gpu-bench-cache";
  std::filesystem::remove_all(dir);
  const Tensor<float> a = zeros<float>({1024}).cuda(), out = zeros<float>({1024}).cuda();
  const auto e = a * 2.0f + 1.0f;
  const cuda::KernelSource k = cuda::forward_kernel(e, cuda::choose_variant(e, e.shape(), out.strides()), "bench_small");
  const int arch = device().arch();
  {
    cuda::KernelCache cold(dir);
    const auto t0 = Clock::now();
    cold.compile_cached(k.source, "bench_small.cu", arch);
    std::printf("NVRTC first compile of a small kernel (sm_%d): %.1f ms\n", arch,
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::vector<double> hits;
  for (int i = 0; i < 20; ++i) {
    cuda::KernelCache warm(dir);
    const auto t0 = Clock::now();
    warm.compile_cached(k.source, "bench_small.cu", arch);
    hits.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(hits.begin(), hits.end());
  std::printf("kernel from the disk cache (a fresh cache object, median of 20): %.3f ms\n", hits[10]);
  const auto words = cuda::detail::descriptor(k, e.shape(), {{on_device(out), out.strides()}}, {}, e);
  device().launch(k, words, {.grid = 4, .block = 256});
  device().synchronize();
  const int kLaunches = int(shrink(10000, 100));
  const auto t0 = Clock::now();
  for (int i = 0; i < kLaunches; ++i) device().launch(k, words, {.grid = 4, .block = 256});
  const double host = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kLaunches;
  device().synchronize();
  std::printf("host time per launch of a 1024-element kernel (10000 launches): %.2f us\n", host);
}

// flex_attention's kernels launched directly (as attention/flex_device.hpp would) on T tensors [1, H, L, D] with the
// tile shape of `cfg`, dense and causal: forward and backward TFLOP/s, and, with `materialized`, the materialized
// softmax(q k^T scale + mask) v forward (cuBLAS, kiln's softmax; an L x L score matrix per head) in the same run.
template <Dtype T>
void flex_direct(const char* name, int64_t L, kiln::attention::FlexKernelConfig cfg, bool materialized) {
  namespace at = kiln::attention;
  using A = typename at::FlexBuffers<T>::A;
  const int64_t B = 1, H = shrink(8, 1), D = cfg.D;
  Generator g(1);
  const auto input = [&] { return randn<float>({B, H, L, D}, &g).to<T>().cuda(); };
  const Tensor<T> q = input(), k = input(), v = input(), dout = input(), out = zeros<T>({B, H, L, D}).cuda(),
                  dq = zeros<T>({B, H, L, D}).cuda(), dk = zeros<T>({B, H, L, D}).cuda(), dv = zeros<T>({B, H, L, D}).cuda();
  const Tensor<A> lse = zeros<A>({B, H, L}).cuda(), delta = zeros<A>({B, H, L}).cuda(), dq_acc = zeros<A>({B, H, L, D}).cuda();
  const Tensor<int> error = zeros<int>({1}).cuda();
  const double scale = 1 / std::sqrt(double(D));
  for (const bool causal : {false, true}) {
    const auto run = [&](const auto& bm) {
      std::vector<uint8_t> states;
      for (at::BlockState st : bm.state) states.push_back(uint8_t(st));
      const Tensor<int> dstates = zeros<int>({int64_t(states.size() + 3) / 4}).cuda();
      device().copy_to_device(on_device(dstates), states.data(), states.size());
      at::FlexBuffers<T> x;
      x.B = B, x.Hq = H, x.Hkv = H, x.Lq = L, x.Lkv = L;
      const auto rows = [](const Tensor<T>& t) { return typename at::FlexBuffers<T>::Rows{on_device(t), t.stride(0), t.stride(1), t.stride(2)}; };
      x.q = rows(q), x.k = rows(k), x.v = rows(v), x.dout = rows(dout);
      x.out = on_device(out), x.lse = on_device(lse), x.delta = on_device(delta), x.dq_acc = on_device(dq_acc);
      x.dq = on_device(dq), x.dk = on_device(dk), x.dv = on_device(dv);
      x.scale = scale;
      x.error = on_device(error);
      cfg.entry = std::string("bench_flex_") + (causal ? "causal_" : "dense_") + (cfg.tensor_cores ? "mma" : "cores");
      const at::FlexKernels ks = at::flex_kernels<T>(at::NoScoreMod{}, bm, cfg);
      const auto words = at::flex_descriptor(ks, x, at::NoScoreMod{}, bm, on_device(dstates), cfg);
      const unsigned q_tiles = unsigned(B * H * L / cfg.block_q), kv_tiles = unsigned(B * H * L / cfg.block_kv);
      const double flops = 4.0 * double(B * H) * double(L) * double(L) * double(D) * (causal ? 0.5 : 1.0);
      const double tf = median_seconds(5, [&] {
        device().launch(ks.forward, words, {.grid = q_tiles, .block = unsigned(cfg.forward_threads())});
      });
      const double tb = median_seconds(3, [&] {
        device().fill_zero(on_device(dq_acc), size_t(dq_acc.numel()) * sizeof(A));
        device().launch(ks.delta, words, {.grid = unsigned(std::max<int64_t>(1, B * H * L / 256)), .block = 256});
        device().launch(ks.backward, words, {.grid = kv_tiles, .block = unsigned(cfg.backward_threads())});
        device().launch(ks.store_dq, words, {.grid = unsigned(std::max<int64_t>(1, B * H * L * D / 1024)), .block = 256});
      });
      std::printf("flex_attention %s D=%lld L=%lld H=8 %s: forward %.2f TFLOP/s (%.2f ms), backward %.2f TFLOP/s "
                  "(%.2f ms; 2.5x the forward's FLOPs)", name, (long long)D, (long long)L, causal ? "causal" : "dense",
                  flops / tf / 1e12, tf * 1e3, 2.5 * flops / tb / 1e12, tb * 1e3);
      if (materialized) {
        const Tensor<T> bias = [&] {
          Tensor<float> m = zeros<float>({L, L});
          if (causal)
            for (int64_t i = 0; i < L; ++i) std::fill(m.data_ptr() + i * L + i + 1, m.data_ptr() + (i + 1) * L, -INFINITY);
          return m.to<T>().cuda();
        }();
        const Tensor<T> kt = k.transpose(2, 3);
        const double tm = median_seconds(5, [&] { (void)matmul(softmax(matmul(q, kt) * scale + bias, -1), v); });
        std::printf("; materialized forward %.2f ms (materialized time / flex time: %.2f)", tm * 1e3, tm / tf);
      }
      std::printf("\n");
    };
    if (causal) run(at::create_block_mask(at::causal(), 1, 1, L, L, 128, 128));
    else run(at::dense_block_mask(L, L, 128, 128));
  }
}

// float on CUDA cores at D = 64, L = 4096 against the materialized path; bfloat16 at issue 6's D = 128, L = 8192 on
// CUDA cores and on tensor cores (the tiles flex_device.hpp picks for D = 128), the same kernels but for the products.
void flex() {
  flex_direct<float>("float", shrink(4096, 128), {.D = 64, .Dv = 64, .block_q = 64, .block_kv = 64, .threads_per_row = 4}, true);
  for (const bool tensor_cores : {false, true})
    flex_direct<bfloat16>(tensor_cores ? "bf16 tensor cores" : "bf16 CUDA cores", shrink(8192, 256),
                          {.D = 128, .Dv = 128, .block_q = 64, .block_kv = 32, .threads_per_row = 4, .tensor_cores = tensor_cores},
                          false);
}

// Issue 6's GPU sizes through the public API: flex_attention of bf16 CUDA tensors, B = 1, H = 8, D = 128, L = 8192,
// dense and causal (tensor cores, attention/flex_cuda_mma.hpp), against the materialized softmax(q k^T scale + mask) v
// (cuBLAS in bf16, kiln's softmax) in the same run; and the forward + backward (the backward counted as 2.5 forwards).
void flex_bf16() {
  namespace at = kiln::attention;
  const int64_t B = 1, H = shrink(8, 1), L = shrink(8192, 256), D = 128;
  Generator g(3);
  const auto make = [&] { return randn<float>({B, H, L, D}, &g).to<bfloat16>().cuda(); };
  const Tensor<bfloat16> q = make(), k = make(), v = make(), kt = k.transpose(2, 3);
  const float scale = 1 / std::sqrt(float(D));
  const auto run = [&](const auto& bm, bool causal) {
    const double flops = 4.0 * double(B * H) * double(L) * double(L) * double(D) * (causal ? 0.5 : 1.0);
    const double tf = median_seconds(5, [&] { (void)at::flex_attention(q, k, v, at::NoScoreMod{}, bm); });
    Tensor<float> bias = zeros<float>({L, L});
    if (causal)
      for (int64_t i = 0; i < L; ++i) std::fill(bias.data_ptr() + i * L + i + 1, bias.data_ptr() + (i + 1) * L, -INFINITY);
    const Tensor<bfloat16> bias_bf16 = bias.to<bfloat16>().cuda();
    const double tm = median_seconds(3, [&] {
      const Tensor<bfloat16> scores = matmul(q, kt) * scale + bias_bf16;
      (void)matmul(softmax(scores, -1), v);
    });
    const Tensor<bfloat16> dout = make();
    const double tfb = median_seconds(3, [&] {
      const Tensor<bfloat16> qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(), vg = v.detach().requires_grad_();
      at::flex_attention(qg, kg, vg, at::NoScoreMod{}, bm).backward(dout);
    });
    std::printf("flex_attention bf16 D=128 L=8192 H=8 %s forward: %.2f TFLOP/s (%.2f ms); materialized %.2f ms "
                "(materialized time / flex time: %.2f); forward + backward %.2f TFLOP/s (%.2f ms)\n",
                causal ? "causal" : "dense", flops / tf / 1e12, tf * 1e3, tm * 1e3, tm / tf, 3.5 * flops / tfb / 1e12, tfb * 1e3);
  };
  run(at::dense_block_mask(L, L), false);
  run(at::create_block_mask(at::causal(), 1, 1, L, L), true);
}

// Medians of f() and g() timed alternately, reps each after a warm-up of both, so that drift hits both alike.
std::pair<double, double> alternating_medians(int reps, const std::function<void()>& f, const std::function<void()>& g) {
  std::vector<double> tf, tg;
  for (int i = 0; i <= reps; ++i)
    for (auto [run, t] : {std::pair{&f, &tf}, std::pair{&g, &tg}}) {
      device().synchronize();
      const auto t0 = Clock::now();
      (*run)();
      device().synchronize();
      if (i > 0) t->push_back(std::chrono::duration<double>(Clock::now() - t0).count());  // (i = 0: the warm-up)
    }
  std::sort(tf.begin(), tf.end());
  std::sort(tg.begin(), tg.end());
  return {tf[tf.size() / 2], tg[tg.size() / 2]};
}

// Times kiln's matmul and a direct cublasSgemm alternately.
void sgemm() {
  const int64_t n = shrink(4096, 128);
  Generator g(2);
  const Tensor<float> a = randn<float>({n, n}, &g).cuda(), b = randn<float>({n, n}, &g).cuda(), c = zeros<float>({n, n}).cuda();
  cuda::Cublas& blas = cuda::Cublas::get();
  using Sgemm = int (*)(void*, int, int, int, int, int, const float*, const float*, int, const float*, int,
                        const float*, float*, int);
  const auto direct_sgemm = blas.symbol<Sgemm>("cublasSgemm_v2");
  const cuda::blas::Handle handle = blas.handle(0);
  const float one = 1, zero = 0;
  const int ni = int(n);
  const auto kiln_product = [&] { (void)matmul(a, b); };
  const auto direct = [&] {  // row-major c = a b is column-major c^T = b^T a^T
    blas.require(direct_sgemm(handle, cuda::blas::kNoTrans, cuda::blas::kNoTrans, ni, ni, ni, &one, on_device(b), ni,
                              on_device(a), ni, &zero, on_device(c), ni),
                 "cublasSgemm_v2");
  };
  const auto [k, d] = alternating_medians(10, kiln_product, direct);
  const double flops = 2.0 * double(n) * double(n) * double(n);
  std::printf("sgemm 4096^3 float32 (TF32 off): kiln matmul %.1f TFLOP/s (%.3f ms), cublasSgemm directly %.1f TFLOP/s "
              "(%.3f ms): kiln's overhead %+.1f%% (target under 5%%)\n", flops / k / 1e12, k * 1e3, flops / d / 1e12,
              d * 1e3, (k / d - 1) * 100);
}

// The Fashion-MNIST CNN's convolutions (3x3, padding 1) and a BatchNorm2d in training, batch 256, forward +
// backward (input and weight gradients), through cuDNN and through kiln's own kernels (im2col around cuBLAS;
// reductions and expressions), alternately in one run. TFLOP/s count 3 x 2 N Cout Cin 9 H W (forward, input and
// weight gradients). Float with TF32 off (cuDNN and cuBLAS alike), and the 64->128 layer again in bfloat16.
void convolutions() {
  if (!cuda::Cudnn::usable(0)) {
    std::puts("conv2d: cuDNN not usable on cuda:0 (KILN_DEBUG=1 says why); nothing compared");
    return;
  }
  std::printf("conv2d: cuDNN %zu (%s)\n", cuda::Cudnn::get().version(), cuda::Cudnn::get().path().c_str());
  const int64_t n = shrink(256, 2);
  Generator g(3);
  const auto compare = [](const std::string& what, double flops, const std::function<void()>& step) {
    const auto [with, without] = alternating_medians(10, [&] { cuda::cudnn_enabled(true); step(); },
                                                     [&] { cuda::cudnn_enabled(false); step(); });
    cuda::cudnn_enabled(true);
    char rate[64] = "";
    if (flops > 0) std::snprintf(rate, sizeof rate, " (%.1f TFLOP/s)", flops / with / 1e12);
    std::printf("%s, forward + backward: cuDNN %.3f ms%s, kiln's own kernels %.3f ms: cuDNN %.2fx as fast\n",
                what.c_str(), with * 1e3, rate, without * 1e3, without / with);
  };
  struct Layer {
    int64_t cin, cout, hw;
  };
  for (const Layer l : {Layer{1, 64, 28}, Layer{64, 128, 14}}) {
    const Tensor<float> x = randn<float>({n, l.cin, l.hw, l.hw}, &g).cuda().requires_grad_();
    const Tensor<float> w = Tensor<float>(randn<float>({l.cout, l.cin, 3, 3}, &g) * 0.1f).cuda().requires_grad_();
    const double flops = 3 * 2.0 * double(n * l.cout * l.cin * 9 * l.hw * l.hw);
    const std::string what = detail::cat("conv2d ", l.cin, "->", l.cout, " 3x3 at ", l.hw, "x", l.hw, ", batch ", n);
    compare(what + ", float32", flops, [&] { sum(nn::functional::conv2d(x, w, {}, {1, 1}, {1, 1})).backward(); });
    if (l.cin == 64) {
      const Tensor<bfloat16> xh = x.detach().to<bfloat16>().requires_grad_(), wh = w.detach().to<bfloat16>().requires_grad_();
      compare(what + ", bfloat16", flops, [&] { sum(nn::functional::conv2d(xh, wh, {}, {1, 1}, {1, 1})).backward(); });
    }
  }
  nn::BatchNorm2d bn(128);
  bn->to(Device(kCUDA, 0));
  const Tensor<float> x = randn<float>({n, 128, 14, 14}, &g).cuda().requires_grad_();
  compare(detail::cat("BatchNorm2d(128) training at 14x14, batch ", n), 0, [&] { sum(bn(x)).backward(); });
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::puts("gpu_bench: no CUDA device; nothing measured");
    return 0;
  }
  std::printf("gpu_bench: cuda:0 is sm_%d, driver %d, NVRTC %d\n", device().arch(), cuda::Driver::get().version(),
              cuda::Nvrtc::get().version());
  const auto section = [](const char* name, const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      std::printf("%s: failed: %s\n", name, e.what());
    }
  };
  double copy_gbs = 0;
  section("copy", [&] {
    const size_t bytes = size_t(shrink(int64_t(1) << 30, 1 << 20));
    const Tensor<float> a = zeros<float>({int64_t(bytes / 4)}).cuda(), b = zeros<float>({int64_t(bytes / 4)}).cuda();
    const double t = median_seconds(10, [&] { device().copy_on_device(on_device(b), on_device(a), bytes); });
    copy_gbs = 2.0 * double(bytes) / t / 1e9;
    std::printf("device copy (cuMemcpyDtoD, 1 GiB, read + write): %.1f GB/s\n", copy_gbs);
  });
  section("elementwise", [&] { elementwise(copy_gbs); });
  section("reductions", [&] { reductions(copy_gbs); });
  section("compile and launch", compile_and_launch_overhead);
  section("attention", flex);
  section("attention bf16", flex_bf16);
  section("sgemm", sgemm);
  section("convolutions", convolutions);
  return 0;
}

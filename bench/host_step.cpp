// One training step of the Fashion-MNIST CNN (examples/fashion_mnist/model.hpp) on a CUDA device: forward,
// cross_entropy, backward, Adam, at batch 64 (--batch N) on random data already on the device. Prints the median
// wall time per step over --steps steps after --warmup ones, each ended by a synchronize.
//
// On the emulated device with KILN_EMULATED_SKIP_KERNELS=1 (tests/cuda_null/emulated/skip_kernels.hpp) the launches,
// cuBLAS and cuDNN calls are made and checked but not run: the time is kiln's host side per step (building
// descriptors, allocating, recording autograd, launching), which bounds a GPU's step when its kernels are fast
// (docs/performance.md, "Host time per training step"); the launches, cuBLAS products and cuDNN calls per step are
// printed too. On a GPU it is the step's time. Built with KILN_WITH_CUDA (bench/meson.build).
//
//   KILN_CUDA_DRIVER_LIBRARY=... (the emulated libraries, as tests/meson.build sets them) KILN_EMULATED_SKIP_KERNELS=1 \
//     build/bench/host_step [--batch 64] [--steps 200] [--warmup 20] [--no-cudnn]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../examples/fashion_mnist/model.hpp"
#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

int main(int argc, char** argv) {
  using namespace kiln;
  int64_t batch = 64;
  int steps = 200, warmup = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc) batch = std::atoll(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc) warmup = std::atoi(argv[++i]);
    else if (a == "--no-cudnn") cuda::cudnn_enabled(false);
    else {
      std::fprintf(stderr, "host_step: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (!cuda::is_available()) {
    std::puts("host_step: no CUDA device; nothing measured");
    return 0;
  }
  const Device device(kCUDA, 0);
  cuda::DeviceContext& context = cuda::DeviceContext::get(0);
  Generator g(1);
  nn::Sequential net = fashion_mnist::make_model();
  net->to(device);
  optim::Adam opt(net->parameters(), optim::AdamOptions(1e-3));
  const Tensor<float> images = randn<float>({batch, 1, 28, 28}, &g).to(device);
  const Tensor<int64_t> labels = randint<int64_t>(0, 10, {batch}, &g).to(device);
  const auto step = [&] {
    opt.zero_grad();
    nn::functional::cross_entropy(net(images), labels).backward();
    opt.step();
    context.synchronize();
  };
  // The emulated libraries' counts of launches, cuBLAS products and cuDNN calls (absent from real ones).
  const auto counter = [](auto& library, const char* name) -> std::function<long long()> {
    try {
      if (std::string(name) == "kiln_emulated_launches_on") {
        const auto f = library.template symbol<long long (*)(void*)>(name);
        return [f] { return f(nullptr); };
      }
      const auto f = library.template symbol<long (*)()>(name);
      return [f] { return static_cast<long long>(f()); };
    } catch (const std::exception&) {
      return nullptr;
    }
  };
  const std::function<long long()> launches = counter(cuda::Driver::get(), "kiln_emulated_launches_on");
  const std::function<long long()> products = counter(cuda::Cublas::get(), "kiln_emulated_cublas_calls");
  const std::function<long long()> cudnn_calls =
      cuda::Cudnn::usable(0) ? counter(cuda::Cudnn::get(), "kiln_emulated_cudnn_calls") : nullptr;
  for (int i = 0; i < warmup; ++i) step();
  const auto count = [](const std::function<long long()>& f) { return f ? f() : 0; };
  const long long launches0 = count(launches), products0 = count(products), cudnn0 = count(cudnn_calls);
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  const char* skip = std::getenv("KILN_EMULATED_SKIP_KERNELS");
  std::printf("host_step: batch %lld, %s, median %.3f ms per step (p10 %.3f, p90 %.3f) over %d steps%s",
              static_cast<long long>(batch), cuda::Cudnn::usable(0) ? "cuDNN" : "no cuDNN", t[t.size() / 2] * 1e3,
              t[t.size() / 10] * 1e3, t[t.size() * 9 / 10] * 1e3, steps,
              skip && *skip && *skip != '0' ? " (kernels skipped: kiln's host time)" : "");
  if (launches)
    std::printf(", per step %.1f launches, %.1f cuBLAS products, %.1f cuDNN calls", double(count(launches) - launches0) / steps,
                double(count(products) - products0) / steps, double(count(cudnn_calls) - cudnn0) / steps);
  std::printf("\n");
  return 0;
}

// Autograd on CUDA tensors (cuda/autograd.hpp): the same computation run on the CPU and on the device, forward
// values and every gradient compared. In CI on the emulated device (tests/meson.build), on a GPU by tests/gpu/run.sh.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "kiln/attention.hpp"
#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

#include "compare.hpp"
#include "cudnn_record.hpp"

namespace test_cuda_emulated_autograd {

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::Relative;

namespace {

auto no_device() { return doctest::skip(!cuda::is_available()); }

const Device kCuda0(kCUDA, 0);

// Inputs made on the host, moved to `device`, marked as requiring grad where asked.
struct Inputs {
  std::vector<Tensor<float>> tensors;
  Inputs(const std::vector<Tensor<float>>& host, const std::vector<bool>& requires_grad, Device device) {
    for (size_t i = 0; i < host.size(); ++i) {
      Tensor<float> t = host[i].clone().to(device);  // (a tensor of its own on the CPU too)
      if (requires_grad[i]) t.requires_grad_();
      tensors.push_back(t);
    }
  }
};

// f(inputs) -> a scalar loss, run on the CPU and on cuda:0: the losses and the gradients of the inputs that require
// grad agree (tol relative), and the device's gradients are on the device.
void expect_same_gradients(const std::vector<Tensor<float>>& host, const std::vector<bool>& requires_grad,
                           const std::function<Tensor<float>(const std::vector<Tensor<float>>&)>& f, double tol,
                           const std::string& what, Relative relative = Relative::kElement) {
  Inputs cpu(host, requires_grad, kCPU), gpu(host, requires_grad, kCuda0);
  const Tensor<float> loss_cpu = f(cpu.tensors), loss_gpu = f(gpu.tensors);
  REQUIRE(loss_gpu.is_cuda());
  expect_close(loss_gpu.cpu().detach(), loss_cpu.detach(), tol, what + ": the loss");
  loss_cpu.backward();
  loss_gpu.backward();
  for (size_t i = 0; i < host.size(); ++i) {
    if (!requires_grad[i]) {
      CHECK_FALSE(gpu.tensors[i].grad().defined());
      continue;
    }
    REQUIRE(gpu.tensors[i].grad().defined());
    CHECK(gpu.tensors[i].grad().is_cuda());
    expect_close(gpu.tensors[i].grad().cpu(), cpu.tensors[i].grad(), tol, detail::cat(what, ": the gradient of input ", i),
                 relative);
  }
}

// Two outputs, x * k and x * x; backward uses both gradients, so a missing one must arrive as zeros on x's device.
struct ScaleAndSquare : autograd::Function<ScaleAndSquare> {
  static std::vector<Tensor<float>> forward(autograd::AutogradContext* ctx, Tensor<float> x, double k) {
    ctx->save_for_backward<float>({x});
    ctx->saved_data["k"] = k;
    return {x * float(k), x * x};
  }
  static std::vector<Tensor<float>> backward(autograd::AutogradContext* ctx, std::vector<Tensor<float>> grads) {
    const Tensor<float> x = ctx->get_saved_variables()[0];
    const float k = float(std::any_cast<double>(ctx->saved_data["k"]));
    return {grads[0] * k + grads[1] * x * 2.0f, {}};
  }
};

}  // namespace

TEST_CASE("a custom autograd::Function on the device: an output without a gradient gets zeros on the device" *
          no_device()) {
  Generator g(5);
  const Tensor<float> x = randn<float>({3, 4}, &g);
  expect_same_gradients({x}, {true}, [](const std::vector<Tensor<float>>& in) {
    return sum(ScaleAndSquare::apply(in[0], 3.0)[1]);  // (the first output gets no gradient)
  }, 1e-6, "ScaleAndSquare's second output");
  expect_same_gradients({x}, {true}, [](const std::vector<Tensor<float>>& in) {
    const auto out = ScaleAndSquare::apply(in[0], 3.0);
    return sum(out[0] * out[1]);
  }, 1e-5, "both outputs");
}

TEST_CASE("a fused expression's backward runs as one kernel on the device, broadcast leaves summed there" * no_device()) {
  Generator g(11);
  const Tensor<float> x = randn<float>({6, 37}, &g), w = randn<float>({37}, &g), b = randn<float>({6, 1}, &g);
  expect_same_gradients({x, w, b}, {true, true, true}, [](const auto& t) {
    return sum(Tensor<float>(t[0] * t[1] + sin(t[2]) * exp(t[0] * 0.25f)));
  }, 1e-5, "x * w + sin(b) * exp(x / 4)");
  // The sum's own fused backward (the incoming gradient broadcast over the reduced dims), a leaf without grad (its
  // output is skipped), one tensor as several leaves.
  expect_same_gradients({x, w}, {true, false}, [](const auto& t) { return sum(t[0] * t[0] * t[1] + t[0]); }, 1e-5,
                        "sum(x * x * w + x)");
  // Two backward passes accumulate into .grad, on the device.
  Tensor<float> d = x.cuda().requires_grad_();
  sum(d * 2.0f).backward();
  sum(d * d).backward();
  expect_close(d.grad().cpu(), Tensor<float>(2.0f + x * 2.0f), 1e-6, "accumulated");
}

TEST_CASE("reductions, softmax and views: their backward formulas run on the device" * no_device()) {
  Generator g(12);
  const Tensor<float> x = randn<float>({4, 5, 9}, &g), y = randn<float>({4, 5, 9}, &g);
  expect_same_gradients({x, y}, {true, true}, [](const auto& t) {
    return Tensor<float>(sum(mean(t[0] * t[1], Dims{0, 2}) * 3.0f) + sum(amax(t[0], Dims{1})) - sum(amin(t[1], Dims{2})));
  }, 1e-5, "mean, amax, amin");
  expect_same_gradients({x, y}, {true, true}, [](const auto& t) {
    return Tensor<float>(sum(softmax(t[0], 2) * t[1]) + sum(log_softmax(t[1], 1) * t[0]));
  }, 1e-5, "softmax, log_softmax");
  expect_same_gradients({x, y}, {true, true}, [](const auto& t) {
    return Tensor<float>(norm(t[0]) + sum(norm(t[1] * t[0], 1, {1})) + norm(t[1], 3.5) +
                         norm(t[0], std::numeric_limits<double>::infinity()) + norm(t[1], 0));
  }, 1e-5, "norm, p = 2, 1 along a dim, 3.5, inf, 0");
  // clip_grad_norm_ sums the norms on the device and scales the gradients there.
  std::vector<Tensor<float>> params = {x.cuda().requires_grad_(), y.cuda().requires_grad_()};
  sum(params[0] * params[1] * 10.0f).backward();
  const double want = std::sqrt(double(sum(square(y * 10.0f)).item()) + double(sum(square(x * 10.0f)).item()));
  CHECK(optim::clip_grad_norm_(params, 1.0) == doctest::Approx(want).epsilon(1e-6));
  CHECK(params[0].grad().is_cuda());
  CHECK(double(norm(params[0].grad()).item()) == doctest::Approx(std::sqrt(double(sum(square(y * 10.0f)).item())) / want).epsilon(1e-5));
  expect_same_gradients({x}, {true}, [](const auto& t) {
    const Tensor<float> v = t[0].transpose(0, 2).slice(1, 1, 4);  // a strided copy back, a zeroed base
    return Tensor<float>(sum(v * v.flatten().reshape(v.shape())) + sum(t[0].unsqueeze(0).expand({3, 4, 5, 9}) * 2.0f));
  }, 1e-5, "views");
}

TEST_CASE("prod, logsumexp, var, std, cumsum, topk, max/min with indices, all, any on the device, with their gradients; printing" * no_device()) {
  Generator g(15);
  const Tensor<float> x = randn<float>({4, 5, 9}, &g), y = rand<float>({4, 5, 9}, &g) + 0.5f;
  expect_same_gradients({x, y}, {true, true}, [](const auto& t) {
    return Tensor<float>(sum(prod(t[1], Dims{1})) + sum(logsumexp(t[0] * 3.0f, Dims{0, 2})) + sum(var(t[0] * t[1], Dims{2})) +
                         kiln::std(t[0]) + sum(kiln::std(t[1], Dims{0, 1}, 0.0, true)));
  }, 1e-5, "prod, logsumexp, var, std");
  expect_same_gradients({x}, {true}, [](const auto& t) {
    return Tensor<float>(sum(cumsum(t[0], 1) * cumsum(t[0].transpose(0, 2), -1).transpose(0, 2)));
  }, 1e-5, "cumsum along a middle and a last dim");
  // Integer prod and cumsum give int64 on the device too; logsumexp of a row of -inf is -inf, of one with +inf +inf.
  const Tensor<int32_t> i = tensor<int32_t>({1, -2, 3, 4, 5, 6}).view({2, 3});
  CHECK(prod(i.cuda(), 1).to_vector() == std::vector<int64_t>{-6, 120});
  CHECK(cumsum(i.cuda(), 0).to_vector() == std::vector<int64_t>{1, -2, 3, 5, 3, 9});
  constexpr float inf = std::numeric_limits<float>::infinity();
  CHECK(logsumexp(tensor<float>({-inf, -inf, 1, inf}).view({2, 2}).cuda(), 1).to_vector() == std::vector<float>{-inf, inf});
  // max / min with indices, topk (NaN first for the largest, last for the smallest; ties by the lower index), all
  // and any, as on the CPU; the values' gradients go where the indices point.
  Tensor<float> line = tensor<float>({3, std::nanf(""), 3, -1, 7, 3, -1, 0}).view({2, 4});
  for (const bool largest : {true, false}) {
    const auto [vc, ic] = topk(line, 3, 1, largest);
    const auto [vd, id] = topk(line.cuda(), 3, 1, largest);
    CHECK(id.is_cuda());
    CHECK(id.to_vector() == ic.to_vector());
    const std::vector<float> on_device = vd.to_vector(), on_host = vc.to_vector();
    for (size_t j = 0; j < on_host.size(); ++j)  // (NaN where the CPU has NaN)
      CHECK((on_device[j] == on_host[j] || (std::isnan(on_device[j]) && std::isnan(on_host[j]))));
  }
  expect_same_gradients({x}, {true}, [](const auto& t) {
    const auto [values, indices] = topk(t[0], 3, 1);
    const auto [largest, where_max] = max(t[0], 2);
    const auto [smallest, where_min] = min(t[0], 0, true);
    return Tensor<float>(sum(values * values) + sum(largest * (where_max.template to<float>() + 1.0f)) + sum(smallest));
  }, 1e-5, "topk, max and min with indices");
  CHECK(std::get<1>(max(line.cuda(), 1)).to_vector() == std::get<1>(max(line, 1)).to_vector());
  for (const bool descending : {false, true})
    CHECK(argsort(line.cuda(), 1, descending).to_vector() == argsort(line, 1, descending).to_vector());
  const Tensor<float> mixed = tensor<float>({0, 0, std::nanf(""), 1, 1, 2}).view({2, 3});
  CHECK(all(mixed.cuda(), 1).to_vector() == std::vector<bool>{false, true});
  CHECK(any(mixed.cuda(), 1).to_vector() == std::vector<bool>{true, true});
  CHECK(any(mixed.cuda() > 1.5f).item());
  CHECK_FALSE(all(mixed.cuda() > 0.5f).item());
  std::ostringstream printed;
  printed << tensor<float>({1.5f, -2, 3}).cuda() << "\n" << tensor<int64_t>({7}).cuda().view({});
  CHECK(printed.str() == "tensor([ 1.5000, -2.0000,  3.0000], device='cuda:0')\ntensor(7, device='cuda:0')");
}

TEST_CASE("reductions with few outputs split each output's elements into chunks, then fold them: the CPU's results" * no_device()) {
  CHECK(cuda::reduction_splits(1, 100000) == 390);  // (chunks of at least 256 elements, 8192 chunks at most)
  CHECK(cuda::reduction_splits(4, 50000) == 195);
  CHECK(cuda::reduction_splits(20000, 50000) == 1);  // outputs enough
  CHECK(cuda::reduction_splits(1, 300) == 1);        // elements too few
  Generator g(41);
  const Tensor<float> x = randn<float>({4, 50000}, &g), y = randn<float>({4, 50000}, &g);
  expect_same_gradients({x, y}, {true, true}, [](const auto& t) {
    return Tensor<float>(sum(t[0] * t[1]) + sum(mean(t[0], Dims{1}) * 3.0f) + sum(amax(t[1], Dims{1})) -
                         sum(amin(t[0] * 2.0f, Dims{1})) + norm(t[1]) + logsumexp(t[0]));
  }, 1e-5, "split sum, mean, amax, amin, norm, logsumexp");
  // Index reductions: the first extreme, also when equal values sit in a later chunk at a lower index (chunks
  // interleave) or a NaN comes first.
  Tensor<float> ties = zeros<float>({1, 100000});
  ties.data_ptr()[1030] = 5;
  ties.data_ptr()[7] = 5;
  ties.data_ptr()[99999] = 5;
  CHECK(argmax(ties.cuda(), 1).to_vector() == std::vector<int64_t>{7});
  CHECK(argmin(ties.cuda(), 1).to_vector() == std::vector<int64_t>{0});
  CHECK(std::get<1>(max(Tensor<float>(ties * -1.0f).cuda(), 1)).to_vector() == std::vector<int64_t>{0});
  ties.data_ptr()[4000] = std::nanf("");
  ties.data_ptr()[50000] = std::nanf("");
  CHECK(argmax(ties.cuda(), 1).to_vector() == std::vector<int64_t>{4000});
  CHECK(std::isnan(amax(ties.cuda()).item()));
  // Integers, products.
  const Tensor<int32_t> i = arange<int32_t>(0, 100000);
  CHECK(sum(i.cuda()).item() == int64_t(99999) * 100000 / 2);
  const Tensor<double> near_one = Tensor<double>(1.0 + randn<double>({20000}, &g) * 1e-4);
  CHECK(prod(near_one.cuda()).item() == doctest::Approx(prod(near_one).item()).epsilon(1e-12));
}

TEST_CASE("autocast follows the region of the operands' device: CUDA products, linear, conv2d, attention in 16 bits" * no_device()) {
  Generator g(31);
  const Tensor<float> a = randn<float>({8, 16}, &g), b = randn<float>({16, 12}, &g), bias = randn<float>({12}, &g);
  const Tensor<float> x = randn<float>({2, 3, 9, 9}, &g), w = randn<float>({4, 3, 3, 3}, &g);
  const Tensor<float> q = randn<float>({1, 2, 20, 8}, &g), k = randn<float>({1, 2, 20, 8}, &g), v = randn<float>({1, 2, 20, 8}, &g);
  // Each op on the host under the CPU's region and on cuda:0 under the CUDA one.
  const std::vector<std::pair<std::string, std::function<Tensor<float>(Device)>>> ops = {
      {"matmul", [&](Device d) { return matmul(a.to(d), b.to(d)); }},
      {"linear", [&](Device d) { return nn::functional::linear(a.to(d), b.t().to(d), bias.to(d)); }},
      {"conv2d", [&](Device d) { return nn::functional::conv2d(x.to(d), w.to(d), bias.narrow(0, 0, 4).to(d), {2, 2}, {1, 1}); }},
      {"flex_attention", [&](Device d) { return attention::flex_attention(q.to(d), k.to(d), v.to(d)); }}};
  for (const auto& [name, op] : ops) {
    const Tensor<float> full = op(kCPU);
    {
      AutocastGuard cpu_only(kCPU, kBFloat16);  // the CPU's region leaves CUDA tensors alone
      expect_close(op(kCuda0).cpu(), full, 1e-5, name + " of CUDA tensors under the CPU's region");
    }
    for (const ScalarType h : {kBFloat16, kHalf}) {
      Tensor<float> on_host, on_device;
      {
        AutocastGuard region(kCPU, h);
        on_host = op(kCPU);
      }
      {
        AutocastGuard region(kCUDA, h);
        on_device = op(kCuda0);
        CHECK(on_device.is_cuda());
      }
      const std::string what = name + (h == kHalf ? " in float16" : " in bfloat16");
      // The 16-bit result the CPU's region gives (the sums' order may move it by a rounding step)...
      expect_close(on_device.cpu(), on_host, h == kHalf ? 2e-3 : 1.6e-2, what);
      // ...which is not the float one.
      CHECK_MESSAGE(double(amax(abs(on_device.cpu() - full)).item()) > 1e-5, what);
    }
  }
}

TEST_CASE("GradScaler on CUDA: the scaled loss, a non-finite gradient found on the device, the step skipped" * no_device()) {
  Tensor<float> p = ones<float>({3}, kCuda0).requires_grad_();
  optim::SGD opt(std::vector<Tensor<float>>{p}, optim::SGDOptions(0.1));
  GradScaler scaler(GradScalerOptions{.init_scale = 8.0});
  scaler.scale(sum(p * 2.0f)).backward();
  expect_close(p.grad().cpu(), full<float>({3}, 16.0f), 0, "the scaled gradient");
  CHECK(scaler.step(opt));
  expect_close(p.detach().cpu(), full<float>({3}, 0.8f), 1e-7, "a step with the unscaled gradient 2");
  scaler.update();
  opt.zero_grad();
  scaler.scale(sum(p * std::numeric_limits<float>::infinity())).backward();
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_scale() == 4.0);  // backed off
  expect_close(p.detach().cpu(), full<float>({3}, 0.8f), 1e-7, "no step");
}

TEST_CASE("factories and random fills on a device, item and to_vector copy back" * no_device()) {
  const Tensor<float> z = zeros<float>({3, 2}, kCuda0), o = ones_like(z), f = full_like(z, 2.5f);
  CHECK(z.is_cuda());
  CHECK(o.is_cuda());
  CHECK(empty_like(o).device() == kCuda0);
  CHECK(f.to_vector() == std::vector<float>(6, 2.5f));
  CHECK(sum(o).item() == 6.0f);
  CHECK(zeros<float>({0}, kCuda0).to_vector().empty());
  // Random fills of CUDA tensors draw on the host from the same generator: the CPU's values, views too.
  const auto same_draws = [](const std::string& what, const std::function<Tensor<float>(Device)>& draw) {
    manual_seed(3);
    const Tensor<float> host = draw(kCPU);
    manual_seed(3);
    const Tensor<float> device = draw(kCuda0);
    CHECK_MESSAGE(device.is_cuda(), what);
    CHECK_MESSAGE(device.to_vector() == host.to_vector(), what);
  };
  same_draws("uniform_", [](Device d) { return uniform_(empty<float>({5, 3}, d), -2, 3); });
  same_draws("normal_ of a column", [](Device d) {
    Tensor<float> t = zeros<float>({5, 3}, d);
    normal_(t.select(1, 1), 1, 2);
    return t;
  });
  same_draws("bernoulli_", [](Device d) { return bernoulli_(empty<float>({40}, d), 0.3); });
  same_draws("rand_like", [](Device d) { return rand_like(zeros<float>({4}, d)); });
  same_draws("randn_like", [](Device d) { return randn_like(zeros<float>({4}, d)); });
  same_draws("bernoulli(p)", [](Device d) { return bernoulli(full<float>({30}, 0.5f, d)); });
  same_draws("multinomial", [](Device d) {
    return multinomial(tensor<float>({0.1f, 0.0f, 0.6f, 0.3f}).to(d), 3).to<float>();
  });
  const Tensor<float> x = randn<float>({4, 9});
  const auto [v, m] = var_mean(x.cuda(), Dims{1});
  CHECK(v.is_cuda());
  expect_close(v.cpu(), std::get<0>(var_mean(x, Dims{1})), 1e-6, "var_mean's variance");
  expect_close(m.cpu(), mean(x, Dims{1}), 1e-6, "var_mean's mean");
}

TEST_CASE("Module::to moves parameters in place, and Adam steps on the device as on the CPU" * no_device()) {
  nn::LayerNorm norm(Shape{7});
  const Tensor<float> weight = norm->weight;  // another handle: sees the move
  norm->to(kCuda0);
  for (const Tensor<float>& p : norm->parameters()) CHECK(p.is_cuda());
  CHECK(weight.is_cuda());
  CHECK(weight.requires_grad());
  norm->to(kCPU);
  CHECK_FALSE(weight.is_cuda());

  // Adam on a parameter of the device, against the same steps on the CPU.
  Generator g(13);
  const Tensor<float> start = randn<float>({33}, &g), target = randn<float>({33}, &g);
  const auto train = [&](Device device) {
    Tensor<float> p = start.clone().to(device).requires_grad_();
    const Tensor<float> t = target.to(device);
    optim::Adam adam(std::vector<Tensor<float>>{p}, optim::AdamOptions(0.05).weight_decay(0.01));
    for (int step = 0; step < 5; ++step) {
      adam.zero_grad();
      sum((p - t) * (p - t) * 0.5f).backward();
      adam.step();
    }
    return p.detach().cpu();
  };
  expect_close(train(kCuda0), train(kCPU), 1e-5, "Adam's parameters after 5 steps");
}

TEST_CASE("conv2d on the device, through cuDNN and through im2col and col2im kernels around cuBLAS, every gradient" *
          no_device()) {
  Generator g(15);
  struct Case {
    Shape x, w;
    std::array<int64_t, 2> stride, padding, dilation;
    int64_t groups;
  };
  // (The last one takes Winograd on the CPU.)
  const std::vector<Case> cases = {Case{{2, 3, 9, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                                   Case{{2, 4, 11, 10}, {6, 2, 3, 2}, {2, 3}, {1, 2}, {2, 1}, 2},
                                   Case{{1, 2, 5, 5}, {3, 2, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1},
                                   Case{{2, 8, 7, 7}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1}};
  const bool recorded = test::emulated_cudnn();
  for (const bool with_cudnn : {true, false}) {
    test::CudnnScope scope(with_cudnn);
    const bool via_cudnn = with_cudnn && cuda::Cudnn::usable(0);
    if (recorded) CHECK(via_cudnn == with_cudnn);
    else MESSAGE("conv2d on this GPU ", via_cudnn ? "through cuDNN " : "by im2col", via_cudnn ? cuda::Cudnn::get().path() : "");
    for (const Case& c : cases) {
      const std::string what = detail::cat("conv2d of ", c.x, " by ", c.w, with_cudnn ? " through cuDNN" : " by im2col");
      const long calls = recorded ? test::cudnn_calls() : 0;
      const Tensor<float> x = randn<float>(c.x, &g), w = randn<float>(c.w, &g), b = randn<float>({c.w[0]}, &g);
      expect_same_gradients({x, w, b}, {true, true, true}, [&](const auto& t) {
        const Tensor<float> y = nn::functional::conv2d(t[0], t[1], t[2], c.stride, c.padding, c.dilation, c.groups);
        return sum(y * y);
      }, 1e-4, what, Relative::kLargest);  // (a GPU's cuBLAS and cuDNN sum in another order)
      if (!recorded) continue;
      // The forward, then the backward's data and filter passes; none when cuDNN is off.
      CHECK_MESSAGE(test::cudnn_calls() - calls == (via_cudnn ? 3 : 0), what);
      if (via_cudnn)
        CHECK_MESSAGE(test::cudnn_last_call().find(detail::cat("groups=", c.groups, ")")) != std::string::npos,
                      (what + ": " + test::cudnn_last_call()));
    }
  }
}

TEST_CASE("conv2d through cuDNN: the algorithm, its workspace and math type follow cudnn_deterministic, "
          "cudnn_allow_tf32 and cudnn_benchmark" * no_device()) {
  if (!test::emulated_cudnn()) return;  // reads the emulated cuDNN's record (a GPU's cuDNN chooses its own)
  Generator g(16);
  const Tensor<float> x = randn<float>({2, 3, 6, 6}, &g).cuda(), w = randn<float>({4, 3, 3, 3}, &g).cuda();
  const auto forward_call = [&](const auto& input, const auto& weight) {
    (void)nn::functional::conv2d(input, weight);
    return test::cudnn_last_call();
  };
  // The emulated heuristics offer a non-deterministic algorithm with a 1 KB workspace first, then a deterministic one
  // without; float stays off TF32 (FMA math, 3) unless allowed (default math, 0); 16-bit data takes tensor cores (1).
  {
    test::CudnnScope scope(true);
    CHECK(forward_call(x, w) == "cudnnConvolutionForward(algo=1, workspace=1024, math=3, groups=1)");
    CHECK(forward_call(x.to<bfloat16>(), w.to<bfloat16>()) ==
          "cudnnConvolutionForward(algo=1, workspace=1024, math=1, groups=1)");
    CHECK(forward_call(x.to<double>(), w.to<double>()) ==
          "cudnnConvolutionForward(algo=1, workspace=1024, math=0, groups=1)");
  }
  {
    test::CudnnScope scope(true, /*deterministic=*/true);
    CHECK(forward_call(x, w) == "cudnnConvolutionForward(algo=0, workspace=0, math=3, groups=1)");
  }
  {
    test::CudnnScope scope(true, false, /*allow_tf32=*/true);  // default math, which lets cuDNN use TF32
    CHECK(forward_call(x, w) == "cudnnConvolutionForward(algo=1, workspace=1024, math=0, groups=1)");
  }
  {
    // cudnn_benchmark: the timed search on the operands, given the largest workspace the heuristics ask for, and its
    // fastest algorithm (the emulated search's algo 0); the next call of the shape searches no more.
    test::CudnnScope scope(true, false, false, /*benchmark=*/true);
    const long calls = test::cudnn_calls();
    const Tensor<float> x2 = randn<float>({3, 3, 7, 5}, &g).cuda();
    const Tensor<float> want = nn::functional::conv2d(x2.cpu(), w.cpu());
    expect_close(nn::functional::conv2d(x2, w).cpu(), want, 1e-5, "conv2d through cuDNN's fastest algorithm");
    CHECK(test::cudnn_last_find() == "cudnnFindConvolutionForwardAlgorithmEx(workspace=1024)");
    CHECK(test::cudnn_last_call() == "cudnnConvolutionForward(algo=0, workspace=0, math=3, groups=1)");
    const Tensor<float> x3(x2 * 2.0f);
    CHECK(forward_call(x3, w) == "cudnnConvolutionForward(algo=0, workspace=0, math=3, groups=1)");
    CHECK(test::cudnn_calls() - calls == 2);  // the two forwards; the searches are not calls
  }
  CHECK(forward_call(randn<float>({3, 3, 7, 5}, &g).cuda(), w) ==
        "cudnnConvolutionForward(algo=1, workspace=1024, math=3, groups=1)");  // the heuristics' choice again
  // double and 16-bit convolutions through cuDNN agree with the CPU's.
  const Tensor<double> xd = randn<double>({2, 3, 6, 6}, &g), wd = randn<double>({4, 3, 3, 3}, &g);
  expect_close(nn::functional::conv2d(xd.cuda(), wd.cuda(), {}, {2, 1}, {1, 0}).cpu(),
               nn::functional::conv2d(xd, wd, {}, {2, 1}, {1, 0}), 1e-12, "double conv2d through cuDNN");
  const Tensor<float16> xh = x.cpu().to<float16>(), wh = w.cpu().to<float16>();
  expect_close(nn::functional::conv2d(xh.cuda(), wh.cuda()).cpu().to<float>(),
               nn::functional::conv2d(xh, wh).to<float>(), 2e-3, "float16 conv2d through cuDNN", Relative::kLargest);
}

TEST_CASE("an MLP trains on the device as on the CPU: Linear, ReLU, Dropout in eval, cross_entropy, Adam" * no_device()) {
  Generator g(14);
  const Tensor<float> x = randn<float>({64, 20}, &g);
  const Tensor<int64_t> labels = argmax(x.slice(1, 0, 5), 1);
  const auto make = [] {
    return nn::Sequential(nn::Linear(20, 32), nn::ReLU(), nn::Dropout(0.5), nn::Linear(32, 5));
  };
  nn::Sequential host = make(), device = make();
  {
    NoGradGuard no_grad;
    std::map<std::string, Tensor<float>> state;
    for (const auto& [name, t] : host->state_dict()) state.emplace(name, t.clone());
    device->load_state_dict(state);
  }
  device->to(kCuda0);
  const auto train = [&](nn::Sequential& model, Device d) {
    model->eval();  // (dropout's mask comes from the host's generator: the same draws on both would need one order)
    const Tensor<float> inputs = x.to(d);
    const Tensor<int64_t> targets = labels.to(d);
    optim::Adam adam(model->parameters(), optim::AdamOptions(1e-2));
    std::vector<float> losses;
    for (int step = 0; step < 20; ++step) {
      adam.zero_grad();
      const Tensor<float> loss = nn::functional::cross_entropy(model(inputs), targets);
      loss.backward();
      adam.step();
      losses.push_back(loss.item());
    }
    return losses;
  };
  const std::vector<float> want = train(host, kCPU), got = train(device, kCuda0);
  expect_close(std::vector<double>(got.begin(), got.end()), std::vector<double>(want.begin(), want.end()), 1e-4,
               "the losses of 20 steps");
  CHECK(want.back() < want.front() * 0.7f);  // (it does learn)
  const auto trained = device->named_parameters();
  const auto reference = host->named_parameters();
  for (size_t i = 0; i < trained.size(); ++i) {
    CHECK(trained[i].second.is_cuda());
    expect_close(trained[i].second.cpu().detach(), reference[i].second.detach(), 1e-4, trained[i].first);
  }
}

}  // namespace test_cuda_emulated_autograd

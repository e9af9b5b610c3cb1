#pragma once
// conv2d of CUDA tensors through cuDNN (cuda/cudnn.hpp): the forward by cudnnConvolutionForward, the backward by
// cudnnConvolutionBackwardData (input) and cudnnConvolutionBackwardFilter (weight), one node for both. nn/conv.hpp
// calls cudnn_conv2d when cudnn_conv2d_applies (cuDNN usable on the device, sizes within its int descriptors) and
// keeps im2col around cuBLAS otherwise. Every geometry of nn::functional::conv2d goes: stride, padding, dilation,
// groups (cudnnSetConvolutionGroupCount); float, double, float16 and bfloat16 (16-bit data accumulates in float,
// on tensor cores: CUDNN_TENSOR_OP_MATH).
#include <climits>

#include "kiln/cuda/cudnn.hpp"
#include "kiln/cuda/evaluate.hpp"
#include "kiln/nn/conv.hpp"

namespace kiln::detail {

// The three convolutions cuDNN runs, each with its heuristic query, workspace query and call, whose descriptor
// arguments come in this pass's order of (x, w, y) roles.
enum class ConvPass { Forward, BackwardData, BackwardFilter };

struct CudnnConvPassApi {
  const char* name;       // the call
  const char* heuristic;  // its _v7 algorithm query
  const char* find;       // its timed search (cudnn_benchmark)
  const char* workspace;  // its workspace query
};
inline CudnnConvPassApi cudnn_conv_api(ConvPass pass) {
  switch (pass) {
    case ConvPass::Forward:
      return {"cudnnConvolutionForward", "cudnnGetConvolutionForwardAlgorithm_v7",
              "cudnnFindConvolutionForwardAlgorithmEx", "cudnnGetConvolutionForwardWorkspaceSize"};
    case ConvPass::BackwardData:
      return {"cudnnConvolutionBackwardData", "cudnnGetConvolutionBackwardDataAlgorithm_v7",
              "cudnnFindConvolutionBackwardDataAlgorithmEx", "cudnnGetConvolutionBackwardDataWorkspaceSize"};
    default:
      return {"cudnnConvolutionBackwardFilter", "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
              "cudnnFindConvolutionBackwardFilterAlgorithmEx", "cudnnGetConvolutionBackwardFilterWorkspaceSize"};
  }
}

// The largest workspace kiln gives a convolution, and cudnn_benchmark's timed search (an algorithm that asks for more
// is passed over; PyTorch tries to allocate what an algorithm asks and passes over it when that fails).
inline constexpr size_t kCudnnWorkspaceLimit = size_t(1) << 30;

// The descriptors of one convolution: x [N, C, H, W], w [K, C / groups, kh, kw], y [N, K, Ho, Wo], all contiguous.
template <Dtype T>
struct CudnnConvolution {
  CudnnConvolution(const Shape& xs, const Shape& ws, const Shape& ys, const nn::Conv2dGeometry& g, int64_t groups)
      : dnn(cuda::Cudnn::get()),
        x(dnn.tensor_4d(type, int(xs[0]), int(xs[1]), int(xs[2]), int(xs[3]))),
        w(dnn.make(cuda::Cudnn::Kind::Filter)),
        conv(dnn.make(cuda::Cudnn::Kind::Convolution)),
        y(dnn.tensor_4d(type, int(ys[0]), int(ys[1]), int(ys[2]), int(ys[3]))),
        key(cat(dtype_name(scalar_type_of<T>()), " input ", xs, " weight ", ws, " output ", ys, " stride ", g.sh, "x",
                g.sw, " padding ", g.ph, "x", g.pw, " dilation ", g.dh, "x", g.dw, " groups ", groups)) {
    dnn.require(dnn.symbol<int (*)(void*, int, int, int, int, int, int)>("cudnnSetFilter4dDescriptor")(
                    w.get(), type, cuda::dnn::kNchw, int(ws[0]), int(ws[1]), int(ws[2]), int(ws[3])),
                cat("cudnnSetFilter4dDescriptor(", ws, ")"));
    dnn.require(dnn.symbol<int (*)(void*, int, int, int, int, int, int, int, int)>("cudnnSetConvolution2dDescriptor")(
                    conv.get(), int(g.ph), int(g.pw), int(g.sh), int(g.sw), int(g.dh), int(g.dw),
                    cuda::dnn::kCrossCorrelation, std::is_same_v<T, double> ? cuda::dnn::kDouble : cuda::dnn::kFloat),
                cat("cudnnSetConvolution2dDescriptor(padding ", g.ph, "x", g.pw, ", stride ", g.sh, "x", g.sw,
                    ", dilation ", g.dh, "x", g.dw, ")"));
    dnn.require(dnn.symbol<int (*)(void*, int)>("cudnnSetConvolutionGroupCount")(conv.get(), int(groups)),
                cat("cudnnSetConvolutionGroupCount(", groups, ")"));
  }

  // Runs `pass` into out (y, dx or dw) on `device`'s current stream; a and b are its two operands in cuDNN's order
  // (forward: x, w; backward data: w, dy; backward filter: x, dy).
  void run(ConvPass pass, int device, const void* a, const void* b, void* out) {
    const CudnnConvPassApi api = cudnn_conv_api(pass);
    const cuda::dnn::Handle h = dnn.handle(device);
    const Choice c = choose(pass, device, h, a, b, out);
    Tensor<float> workspace;
    if (c.workspace > 0)
      workspace = Tensor<float>(cuda_empty<float>({int64_t((c.workspace + 3) / 4)}, Device(kCUDA, device)));
    const cuda::dnn::scaling_t<T> one = 1, zero = 0;
    using Run = int (*)(void*, const void*, void*, const void*, void*, const void*, void*, int, void*, size_t,
                        const void*, void*, void*);
    const auto [da, db, dout] = roles(pass);
    dnn.require(dnn.symbol<Run>(api.name)(h, &one, da, a, db, b, conv.get(), c.algo,
                                          c.workspace ? workspace.impl().device_bytes() : nullptr, c.workspace, &zero,
                                          dout, out),
                cat(api.name, "(", key, ", algorithm ", c.algo, ")"));
  }

 private:
  struct Choice {
    int algo, math;
    size_t workspace;
  };

  // The descriptors of pass's operands a, b and its output, in cuDNN's argument order.
  std::array<void*, 3> roles(ConvPass pass) const {
    switch (pass) {
      case ConvPass::Forward: return {x.get(), w.get(), y.get()};
      case ConvPass::BackwardData: return {w.get(), y.get(), x.get()};
      default: return {x.get(), y.get(), w.get()};
    }
  }

  // The math type a call asks for, as PyTorch's: 16-bit data on tensor cores; float in FMA math unless TF32 is allowed
  // (default math lets cuDNN use TF32 from Ampere on); double in default math.
  static int allowed_math() {
    if constexpr (is_half_v<T>) return cuda::dnn::kTensorOpMath;
    else if constexpr (std::is_same_v<T, float>)
      return cuda::cudnn_allows_tf32() ? cuda::dnn::kDefaultMath : cuda::dnn::kFmaMath;
    else return cuda::dnn::kDefaultMath;
  }
  // Whether an offered algorithm's math type keeps to that: a float convolution without TF32 takes FMA math only.
  static bool math_fits(int math) {
    if constexpr (std::is_same_v<T, float>) return cuda::cudnn_allows_tf32() || math == cuda::dnn::kFmaMath;
    else return true;
  }

  // The first algorithm that succeeded and fits the switches (math type, determinism), with its workspace: from
  // cuDNN's heuristics, or with cudnn_benchmark from its timed search on these operands (fastest first). Remembered
  // per shape, device, pass and switches. Sets the descriptor's math type to the algorithm's.
  Choice choose(ConvPass pass, int device, cuda::dnn::Handle h, const void* a, const void* b, void* out) {
    const CudnnConvPassApi api = cudnn_conv_api(pass);
    const int math = allowed_math();
    const bool deterministic = cuda::cudnn_is_deterministic(), benchmark = cuda::cudnn_benchmark_enabled();
    const std::string k = cat(key, " cuda:", device, " pass ", int(pass), " math ", math,
                              deterministic ? " deterministic" : "", benchmark ? " benchmark" : "");
    static std::mutex mutex;
    static std::map<std::string, Choice> chosen;
    std::unique_lock lock(mutex);
    auto it = chosen.find(k);
    const auto set_math = [&](int m) {
      dnn.require(dnn.symbol<int (*)(void*, int)>("cudnnSetConvolutionMathType")(conv.get(), m),
                  cat("cudnnSetConvolutionMathType(", m, ")"));
    };
    if (it != chosen.end()) {
      set_math(it->second.math);
      return it->second;
    }
    set_math(math);
    const auto [da, db, dout] = roles(pass);
    cuda::dnn::AlgoPerf perf[16] = {};
    int count = 0;
    using Query = int (*)(void*, void*, void*, void*, void*, int, int*, cuda::dnn::AlgoPerf*);
    dnn.require(dnn.symbol<Query>(api.heuristic)(h, da, db, conv.get(), dout, 16, &count, perf),
                cat(api.heuristic, "(", key, ")"));
    if (benchmark) {
      // A workspace as large as the largest any offered algorithm asks for (within the limit), for the search to
      // run every algorithm on these operands.
      size_t bytes = 0;
      for (int i = 0; i < std::min(count, 16); ++i)
        if (perf[i].status == 0 && perf[i].memory <= kCudnnWorkspaceLimit) bytes = std::max(bytes, perf[i].memory);
      Tensor<float> workspace;
      if (bytes > 0)
        workspace = Tensor<float>(cuda_empty<float>({int64_t((bytes + 3) / 4)}, Device(kCUDA, device)));
      using Find = int (*)(void*, void*, const void*, void*, const void*, void*, void*, void*, int, int*,
                           cuda::dnn::AlgoPerf*, void*, size_t);
      dnn.require(dnn.symbol<Find>(api.find)(h, da, a, db, b, conv.get(), dout, out, 16, &count, perf,
                                             bytes ? workspace.impl().device_bytes() : nullptr, bytes),
                  cat(api.find, "(", key, ")"));
    }
    for (int i = 0; i < std::min(count, 16); ++i) {
      const cuda::dnn::AlgoPerf& p = perf[i];
      if (p.status != 0 || !math_fits(p.math_type) || (deterministic && p.determinism != cuda::dnn::kDeterministic) ||
          p.memory > kCudnnWorkspaceLimit)
        continue;
      set_math(p.math_type);
      Choice c{p.algo, p.math_type, 0};
      using Size = int (*)(void*, void*, void*, void*, void*, int, size_t*);
      dnn.require(dnn.symbol<Size>(api.workspace)(h, da, db, conv.get(), dout, p.algo, &c.workspace),
                  cat(api.workspace, "(", key, ", algorithm ", p.algo, ")"));
      return chosen.emplace(k, c).first->second;
    }
    throw cuda::CudaError(cat("kiln::cuda: ", api.name, " of ", key, ": cuDNN's ",
                              benchmark ? "timed search finds" : "heuristics offer", " no algorithm",
                              deterministic ? " that is deterministic" : "",
                              std::is_same_v<T, float> && !cuda::cudnn_allows_tf32() ? " without TF32" : "",
                              " (", count, " offered); kiln::cuda::cudnn_enabled(false) uses kiln's own kernels"));
  }

  static constexpr cuda::dnn::DataType type = cuda::dnn::data_type<T>();
  cuda::Cudnn& dnn;
  cuda::Cudnn::OwnedDescriptor x, w, conv, y;
  std::string key;
};

// conv2d's backward through cuDNN: the input's gradient by BackwardData, the weight's by BackwardFilter.
template <Dtype T>
struct CudnnConvolutionBackward : autograd::Node {
  CudnnConvolutionBackward(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& xc, const Tensor<T>& wc,
                           const Shape& y_shape, const nn::Conv2dGeometry& g, int64_t groups)
      : x_(autograd::SavedTensor::input(xc.impl_ptr())),
        w_(autograd::SavedTensor::input(wc.impl_ptr())),
        y_shape_(y_shape),
        g_(g),
        groups_(groups) {
    next_edges.push_back(autograd::gradient_edge(x.impl_ptr()));
    next_edges.push_back(autograd::gradient_edge(w.impl_ptr()));
  }
  std::string name() const override { return "CudnnConvolutionBackward"; }
  void release_saved() override { x_ = w_ = {}; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr, nullptr};
    NoGradGuard no_grad;
    const Tensor<T> gy = Tensor<T>(grads[0]).contiguous(), x(x_.unpack(*this)), w(w_.unpack(*this));
    const int device = gy.device().index();
    CudnnConvolution<T> conv(x.shape(), w.shape(), y_shape_, g_, groups_);
    autograd::GradList out(2);
    if (next_edges[0].valid()) {
      const Tensor<T> gx(cuda_empty<T>(x.shape(), gy.device()));
      conv.run(ConvPass::BackwardData, device, w.impl().device_bytes(), gy.impl().device_bytes(), gx.impl().device_bytes());
      out[0] = gx.impl_ptr();
    }
    if (next_edges[1].valid()) {
      const Tensor<T> gw(cuda_empty<T>(w.shape(), gy.device()));
      conv.run(ConvPass::BackwardFilter, device, x.impl().device_bytes(), gy.impl().device_bytes(), gw.impl().device_bytes());
      out[1] = gw.impl_ptr();
    }
    return out;
  }

 private:
  autograd::SavedTensor x_, w_;
  Shape y_shape_;
  nn::Conv2dGeometry g_;
  int64_t groups_;
};

// Whether conv2d of x by weight into y_shape goes through cuDNN: enabled and usable on x's device, every tensor's
// elements and the geometry's numbers within an int (the legacy descriptors hold ints).
template <Dtype T>
bool cudnn_conv2d_applies(const Tensor<T>& x, const Tensor<T>& weight, const Shape& y_shape,
                          const nn::Conv2dGeometry& g, int64_t groups) {
  const bool ints = std::max({g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, groups}) <= INT_MAX;
  return x.is_cuda() && x.numel() > 0 && x.numel() < INT_MAX && weight.numel() < INT_MAX &&
         numel_of(y_shape) < INT_MAX && ints && cuda::Cudnn::usable(x.device().index());
}

// y [N, K, Ho, Wo] = conv2d(x, weight) without bias, on x's device, recording its backward when x or weight requires
// grad.
template <Dtype T>
Tensor<T> cudnn_conv2d(const Tensor<T>& x, const Tensor<T>& weight, const nn::Conv2dGeometry& g, int64_t groups,
                       const Shape& y_shape) {
  check<std::invalid_argument>(weight.device() == x.device(), "conv2d: weight is on ", weight.device().str(),
                               ", the input of shape ", x.shape(), " on ", x.device().str(),
                               "; move them to one device first (Module::to)");
  const Tensor<T> xc = x.detach().contiguous(), wc = weight.detach().contiguous();
  const Tensor<T> y(cuda_empty<T>(y_shape, x.device()));
  CudnnConvolution<T> conv(xc.shape(), wc.shape(), y_shape, g, groups);
  conv.run(ConvPass::Forward, x.device().index(), xc.impl().device_bytes(), wc.impl().device_bytes(),
           y.impl().device_bytes());
  if constexpr (is_floating_v<T>) {
    if (GradMode::is_enabled() && (autograd::requires_grad(x.impl()) || autograd::requires_grad(weight.impl())))
      autograd::meta_of(y.impl_ptr()).grad_fn =
          std::make_shared<CudnnConvolutionBackward<T>>(x, weight, xc, wc, y_shape, g, groups);
  }
  return y;
}

}  // namespace kiln::detail

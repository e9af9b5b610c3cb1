#pragma once
// The activation modules, as torch.nn's: ReLU, LeakyReLU, PReLU, ELU, SELU, CELU, GELU, SiLU, Mish, Sigmoid, Tanh,
// Hardtanh, ReLU6, Hardsigmoid, Hardswish, Softplus, Softsign, LogSigmoid, Tanhshrink, Softshrink, Hardshrink,
// Softmax, LogSoftmax and Identity, with libtorch's options (nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
// nn::Softmax(1)), and their functional forms in nn::functional (the expressions of expr/activations.hpp, so
// F::leaky_relu(x, 0.2) fuses into the expression around it).
#include <string>
#include <string_view>

#include "kiln/core/options.hpp"
#include "kiln/nn/module.hpp"
#include "kiln/tensor/softmax.hpp"

namespace kiln::nn {

namespace functional {
using kiln::celu;
using kiln::elu;
using kiln::hardshrink;
using kiln::hardsigmoid;
using kiln::hardswish;
using kiln::hardtanh;
using kiln::leaky_relu;
using kiln::log_softmax;
using kiln::logsigmoid;
using kiln::mish;
using kiln::relu6;
using kiln::selu;
using kiln::sigmoid;
using kiln::silu;
using kiln::softmax;
using kiln::softshrink;
using kiln::softsign;
using kiln::tanh;
using kiln::tanhshrink;

// gelu(x) with erf, or with the tanh approximation when approximate is "tanh" (torch's approximate="none"|"tanh").
template <Dtype T>
Tensor<T> gelu(const Tensor<T>& x, std::string_view approximate = "none") {
  check<std::invalid_argument>(approximate == "none" || approximate == "tanh",
                               "gelu: approximate must be \"none\" or \"tanh\", got \"", approximate, '"');
  return approximate == "tanh" ? Tensor<T>(kiln::gelu_tanh(x)) : Tensor<T>(kiln::gelu(x));
}

// x where beta * x > threshold (linear there, as torch's), else log(1 + exp(beta x)) / beta.
template <Dtype T>
Tensor<T> softplus(const Tensor<T>& x, double beta = 1.0, double threshold = 20.0) {
  check<std::invalid_argument>(beta != 0, "softplus: beta must not be 0");
  if (beta == 1) return where(x > threshold, x, kiln::softplus(x));
  return where(x * beta > threshold, x, kiln::softplus(x * beta) * (1 / beta));
}

// x where x > 0, else weight * x, weight of one element or one per channel (dim 1).
template <Dtype T>
Tensor<T> prelu(const Tensor<T>& x, const Tensor<T>& weight) {
  const int64_t n = weight.numel();
  check<ShapeError>(weight.dim() <= 1 && n >= 1, "prelu: weight must be 1-d (or a scalar), got shape ",
                    weight.shape());
  // (a 0-d weight for a 0-d x, so that the result stays 0-d)
  if (n == 1) return where(x > 0, x, x * weight.reshape(Shape::filled(std::min(x.dim(), 1), 1)));
  // The channels are dim 1; an input of fewer dims has one channel (as PyTorch's).
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  check<ShapeError>(channels == n, "prelu: ", n, " weights for input of shape ", x.shape(), ", which has ",
                    channels, " channels");
  Shape per_channel = Shape::filled(x.dim() - 1, 1);
  per_channel[0] = n;
  return where(x > 0, x, x * weight.reshape(per_channel));
}
}  // namespace functional

// A module applying F{options}(x); F is the options struct of the module (empty for the parameterless ones), with
// the module's name and a print of its options. F's call is a template, so that its kernels are compiled only where
// a program runs the module, not in every file that includes this header (as Conv2dImplT, nn/conv.hpp).
template <class F>
class ActivationImpl : public Module {
 public:
  explicit ActivationImpl(const F& options = {}) : Module(F::kName), options(options) {}
  Tensor<float> forward(const Tensor<float>& x) override { return options(x); }
  void pretty_print(std::ostream& out) const override {
    out << name() << '(';
    options.print(out);
    out << ')';
  }
  F options;
};

namespace detail {
struct NoOptions {
  void print(std::ostream&) const {}
};
#define KILN_PLAIN_ACTIVATION_FN(Name, expression)                         \
  struct Name##Fn : NoOptions {                                             \
    static constexpr const char* kName = #Name;                             \
    template <Dtype T>                                                      \
    Tensor<T> operator()(const Tensor<T>& x) const { return expression; }   \
  };
KILN_PLAIN_ACTIVATION_FN(ReLU, kiln::relu(x))
KILN_PLAIN_ACTIVATION_FN(Tanh, kiln::tanh(x))
KILN_PLAIN_ACTIVATION_FN(Sigmoid, kiln::sigmoid(x))
KILN_PLAIN_ACTIVATION_FN(SiLU, kiln::silu(x))
KILN_PLAIN_ACTIVATION_FN(Mish, kiln::mish(x))
KILN_PLAIN_ACTIVATION_FN(ReLU6, kiln::relu6(x))
KILN_PLAIN_ACTIVATION_FN(SELU, kiln::selu(x))
KILN_PLAIN_ACTIVATION_FN(Hardsigmoid, kiln::hardsigmoid(x))
KILN_PLAIN_ACTIVATION_FN(Hardswish, kiln::hardswish(x))
KILN_PLAIN_ACTIVATION_FN(Softsign, kiln::softsign(x))
KILN_PLAIN_ACTIVATION_FN(LogSigmoid, kiln::logsigmoid(x))
KILN_PLAIN_ACTIVATION_FN(Tanhshrink, kiln::tanhshrink(x))
KILN_PLAIN_ACTIVATION_FN(Identity, x)
#undef KILN_PLAIN_ACTIVATION_FN
}  // namespace detail

struct LeakyReLUOptions {
  static constexpr const char* kName = "LeakyReLU";
  KILN_OPTION(double, negative_slope, 0.01);
 public:
  template <Dtype T>
  Tensor<T> operator()(const Tensor<T>& x) const { return leaky_relu(x, negative_slope()); }
  void print(std::ostream& out) const { out << "negative_slope=" << negative_slope(); }
};
struct ELUOptions {
  static constexpr const char* kName = "ELU";
  KILN_OPTION(double, alpha, 1.0);
 public:
  template <Dtype T>
  Tensor<T> operator()(const Tensor<T>& x) const { return elu(x, alpha()); }
  void print(std::ostream& out) const { out << "alpha=" << alpha(); }
};
struct CELUOptions {
  static constexpr const char* kName = "CELU";
  KILN_OPTION(double, alpha, 1.0);
 public:
  template <Dtype T>
  Tensor<T> operator()(const Tensor<T>& x) const { return celu(x, alpha()); }
  void print(std::ostream& out) const { out << "alpha=" << alpha(); }
};
struct GELUOptions {
  static constexpr const char* kName = "GELU";
  KILN_OPTION(std::string, approximate, "none");
 public:
  template <Dtype T>
  Tensor<T> operator()(const Tensor<T>& x) const { return functional::gelu(x, approximate()); }
  void print(std::ostream& out) const { out << "approximate='" << approximate() << '\''; }
};
struct HardtanhOptions {
  static constexpr const char* kName = "Hardtanh";
  KILN_OPTION(double, min_val, -1.0);
  KILN_OPTION(double, max_val, 1.0);
 public:
  template <Dtype T>
  Tensor<T> operator()(const Tensor<T>& x) const { return hardtanh(x, min_val(), max_val()); }
  void print(std::ostream& out) const { out << "min_val=" << min_val() << ", max_val=" << max_val(); }
};
struct SoftplusOptions {
  static constexpr const char* kName = "Softplus";
  KILN_OPTION(double, beta, 1.0);
  KILN_OPTION(double, threshold, 20.0);
 public:
  template <Dtype T>
  Tensor<T> operator()(const Tensor<T>& x) const { return functional::softplus(x, beta(), threshold()); }
  void print(std::ostream& out) const { out << "beta=" << beta() << ", threshold=" << threshold(); }
};
struct SoftshrinkOptions {
  static constexpr const char* kName = "Softshrink";
  KILN_OPTION(double, lambda, 0.5);
 public:
  template <Dtype T>
  Tensor<T> operator()(const Tensor<T>& x) const { return softshrink(x, lambda()); }
  void print(std::ostream& out) const { out << "lambda=" << lambda(); }
};
struct HardshrinkOptions {
  static constexpr const char* kName = "Hardshrink";
  KILN_OPTION(double, lambda, 0.5);
 public:
  template <Dtype T>
  Tensor<T> operator()(const Tensor<T>& x) const { return hardshrink(x, lambda()); }
  void print(std::ostream& out) const { out << "lambda=" << lambda(); }
};
// Softmax and LogSoftmax over dim (no default, as libtorch's: nn::Softmax(1)).
template <bool kLog>
struct SoftmaxOptionsOf {
  static constexpr const char* kName = kLog ? "LogSoftmax" : "Softmax";
  SoftmaxOptionsOf(int64_t dim) : dim_(dim) {}
  KILN_OPTION(int64_t, dim, 0);
 public:
  template <Dtype T>
  Tensor<T> operator()(const Tensor<T>& x) const {
    if constexpr (kLog) return kiln::log_softmax(x, dim());
    else return kiln::softmax(x, dim());
  }
  void print(std::ostream& out) const { out << "dim=" << dim(); }
};
using SoftmaxOptions = SoftmaxOptionsOf<false>;
using LogSoftmaxOptions = SoftmaxOptionsOf<true>;

#define KILN_ACTIVATION(Name, F)                 \
  KILN_INSTANTIATE(class ActivationImpl<F>);     \
  class Name##Impl : public ActivationImpl<F> {  \
   public:                                       \
    using ActivationImpl<F>::ActivationImpl;     \
  };                                             \
  KILN_MODULE(Name)
KILN_ACTIVATION(ReLU, detail::ReLUFn);
KILN_ACTIVATION(Tanh, detail::TanhFn);
KILN_ACTIVATION(Sigmoid, detail::SigmoidFn);
KILN_ACTIVATION(SiLU, detail::SiLUFn);
KILN_ACTIVATION(Mish, detail::MishFn);
KILN_ACTIVATION(ReLU6, detail::ReLU6Fn);
KILN_ACTIVATION(SELU, detail::SELUFn);
KILN_ACTIVATION(Hardsigmoid, detail::HardsigmoidFn);
KILN_ACTIVATION(Hardswish, detail::HardswishFn);
KILN_ACTIVATION(Softsign, detail::SoftsignFn);
KILN_ACTIVATION(LogSigmoid, detail::LogSigmoidFn);
KILN_ACTIVATION(Tanhshrink, detail::TanhshrinkFn);
KILN_ACTIVATION(Identity, detail::IdentityFn);
KILN_ACTIVATION(LeakyReLU, LeakyReLUOptions);
KILN_ACTIVATION(ELU, ELUOptions);
KILN_ACTIVATION(CELU, CELUOptions);
KILN_ACTIVATION(GELU, GELUOptions);
KILN_ACTIVATION(Hardtanh, HardtanhOptions);
KILN_ACTIVATION(Softplus, SoftplusOptions);
KILN_ACTIVATION(Softshrink, SoftshrinkOptions);
KILN_ACTIVATION(Hardshrink, HardshrinkOptions);
KILN_ACTIVATION(Softmax, SoftmaxOptions);
KILN_ACTIVATION(LogSoftmax, LogSoftmaxOptions);
#undef KILN_ACTIVATION

struct PReLUOptions {
  KILN_OPTION(int64_t, num_parameters, 1);
  KILN_OPTION(double, init, 0.25);
};

// x where x > 0, else a * x, with a learnable slope a per channel (num_parameters of them, or one shared).
// A class template for the reason ActivationImpl's F::operator() is one.
template <class = void>
class PReLUImplT : public Module {
 public:
  explicit PReLUImplT(const PReLUOptions& o = {}) : Module("PReLU"), options(o) {
    check<std::invalid_argument>(o.num_parameters() >= 1, "PReLU: num_parameters must be positive, got ",
                                 o.num_parameters());
    weight = register_parameter("weight", full<float>({o.num_parameters()}, float(o.init())));
  }
  Tensor<float> forward(const Tensor<float>& x) override { return functional::prelu(x, weight); }
  void pretty_print(std::ostream& out) const override {
    out << "PReLU(num_parameters=" << options.num_parameters() << ')';
  }
  PReLUOptions options;
  Tensor<float> weight;
};
using PReLUImpl = PReLUImplT<>;
KILN_INSTANTIATE(class PReLUImplT<void>);
KILN_MODULE(PReLU);

}  // namespace kiln::nn

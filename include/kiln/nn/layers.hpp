#pragma once
// Layers: Linear (PyTorch's default initialization), Sequential, Flatten, Dropout and Embedding, with their
// functional forms in kiln::nn::functional (F::linear, F::relu, ...); the activation modules are in nn/activation.hpp.
#include <cmath>

#include "kiln/nn/activation.hpp"
#include "kiln/nn/containers.hpp"
#include "kiln/nn/module.hpp"
#include "kiln/tensor/gather.hpp"
#include "kiln/tensor/linalg.hpp"
#include "kiln/tensor/random.hpp"

namespace kiln::nn {

namespace functional {
// x @ weight^T + bias, x [..., in], weight [out, in], bias [out] (undefined: none).
KILN_DECL Tensor<float> linear(const Tensor<float>& x, const Tensor<float>& weight, const Tensor<float>& bias = {});
KILN_DECL Tensor<float> relu(const Tensor<float>& x);
// Zeroes each element with probability p and scales the rest by 1 / (1 - p) in training; the identity
// otherwise (as torch.nn.functional.dropout).
KILN_DECL Tensor<float> dropout(const Tensor<float>& x, double p = 0.5, bool training = true);
// Rows of weight [num_embeddings, dim] at the given indices (each in [0, num_embeddings), else std::out_of_range):
// the result has the indices' shape plus dim.
KILN_DECL Tensor<float> embedding(const Tensor<int64_t>& indices, const Tensor<float>& weight);
// indices [...] -> [..., num_classes] int64, 1 where the last index equals the value, else 0
// (torch.nn.functional.one_hot); num_classes = -1 takes the largest index + 1. Each index in [0, num_classes).
KILN_DECL Tensor<int64_t> one_hot(const Tensor<int64_t>& indices, int64_t num_classes = -1);
}  // namespace functional

struct LinearOptions {
  LinearOptions(int64_t in, int64_t out) : in_features(in), out_features(out) {}
  int64_t in_features, out_features;
  bool bias_ = true;
  LinearOptions& bias(bool b) {
    bias_ = b;
    return *this;
  }
};

// y = x W^T + b; W and b uniform in [-1/sqrt(in), 1/sqrt(in)] (PyTorch's kaiming_uniform_ with a = sqrt(5)).
class LinearImpl : public Module {
 public:
  LinearImpl(int64_t in, int64_t out) : LinearImpl(LinearOptions(in, out)) {}
  KILN_DECL explicit LinearImpl(const LinearOptions& o);
  KILN_DECL Tensor<float> forward(const Tensor<float>& x) override;
  KILN_DECL void pretty_print(std::ostream& out) const override;
  LinearOptions options;
  Tensor<float> weight, bias;
};
KILN_MODULE(Linear);

// Flattens dims start_dim..end_dim (default: all but the batch dim).
class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(int64_t start_dim = 1, int64_t end_dim = -1) : Module("Flatten"), start_(start_dim), end_(end_dim) {}
  KILN_DECL Tensor<float> forward(const Tensor<float>& x) override;
  KILN_DECL void pretty_print(std::ostream& out) const override;

 private:
  int64_t start_, end_;
};
KILN_MODULE(Flatten);

class DropoutImpl : public Module {
 public:
  KILN_DECL explicit DropoutImpl(double p = 0.5);
  KILN_DECL Tensor<float> forward(const Tensor<float>& x) override;
  KILN_DECL void pretty_print(std::ostream& out) const override;

 private:
  double p_;
};
KILN_MODULE(Dropout);

// A lookup table of num_embeddings vectors of size dim, initialized from N(0, 1) as PyTorch's.
class EmbeddingImpl : public Module {
 public:
  KILN_DECL EmbeddingImpl(int64_t num_embeddings, int64_t dim);
  KILN_DECL Tensor<float> forward(const Tensor<int64_t>& indices);
  KILN_DECL void pretty_print(std::ostream& out) const override;
  Tensor<float> weight;
};
KILN_MODULE(Embedding);

// Modules applied one after another: a ModuleList (children "0", "1", ..., push_back, extend, ptr<M>(i), iteration)
// whose forward chains them.
class SequentialImpl : public ModuleListImpl {
 public:
  SequentialImpl() : ModuleListImpl(Named{"Sequential"}) {}
  template <class... M>
  explicit SequentialImpl(M&&... modules) : SequentialImpl() {
    (push_back(std::forward<M>(modules)), ...);
  }
  KILN_DECL Tensor<float> forward(const Tensor<float>& x) override;
};
KILN_MODULE(Sequential);

#if KILN_HEADER_DEFINITIONS
namespace functional {
KILN_DECL Tensor<float> linear(const Tensor<float>& x, const Tensor<float>& weight, const Tensor<float>& bias) {
  // Under autocast the weight is cast before it is transposed, so that its 16-bit copy is the cached one
  // (tensor/autocast_cast.hpp); the bias is added in float to the rounded product.
  const Tensor<float> y =
      !autocast::applies_to(x)
          ? matmul(x, weight.t())
          : kiln::detail::autocast_product(x, weight, [](const auto& a, const auto& w) { return matmul(a, w.t()); });
  return bias.defined() ? Tensor<float>(y + bias) : y;
}
KILN_DECL Tensor<float> relu(const Tensor<float>& x) { return kiln::relu(x); }
KILN_DECL Tensor<float> dropout(const Tensor<float>& x, double p, bool training) {
  check<std::invalid_argument>(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return Tensor<float>(x * 0.0f);
  // (Drawn on the host from the CPU generator, then moved to x's device.)
  const Tensor<float> keep = bernoulli_(empty<float>(x.shape()), 1 - p).to(x.device());
  return Tensor<float>(x * keep * float(1 / (1 - p)));
}
KILN_DECL Tensor<float> embedding(const Tensor<int64_t>& indices, const Tensor<float>& weight) {
  check<ShapeError>(weight.dim() == 2, "embedding: weight must be 2-d, got shape ", weight.shape());
  Shape out = indices.shape();
  out.push_back(weight.size(1));
  return kiln::detail::index_select_as(weight, 0, indices.reshape({-1}), "embedding").reshape(out);
}
KILN_DECL Tensor<int64_t> one_hot(const Tensor<int64_t>& indices, int64_t num_classes) {
  const std::vector<int64_t> values = indices.contiguous().to_vector();
  int64_t largest = -1;
  for (const int64_t v : values) {
    check<std::out_of_range>(v >= 0, "one_hot: index ", v, " is negative");
    largest = std::max(largest, v);
  }
  check<std::invalid_argument>(num_classes >= -1 && (num_classes != -1 || !values.empty()), "one_hot: num_classes ",
                               num_classes, " (-1 infers it from the indices, which needs at least one)");
  const int64_t classes = num_classes == -1 ? largest + 1 : num_classes;
  check<std::out_of_range>(largest < classes, "one_hot: index ", largest, " is out of range for ", classes, " classes");
  Shape shape = indices.shape();
  shape.push_back(classes);
  Tensor<int64_t> out = zeros<int64_t>(shape);
  for (size_t i = 0; i < values.size(); ++i) out.data_ptr()[int64_t(i) * classes + values[i]] = 1;
  return out.to(indices.device());
}
}  // namespace functional

KILN_DECL LinearImpl::LinearImpl(const LinearOptions& o) : Module("Linear"), options(o) {
  check<std::invalid_argument>(o.in_features > 0 && o.out_features > 0, "Linear: features must be positive, got ",
                               o.in_features, " and ", o.out_features);
  const double bound = 1 / std::sqrt(double(o.in_features));
  weight = register_parameter("weight", uniform_(empty<float>({o.out_features, o.in_features}), -bound, bound));
  if (o.bias_) bias = register_parameter("bias", uniform_(empty<float>({o.out_features}), -bound, bound));
}
KILN_DECL Tensor<float> LinearImpl::forward(const Tensor<float>& x) {
  check<ShapeError>(x.dim() >= 1 && x.size(-1) == options.in_features, "Linear: input of shape ", x.shape(),
                    " does not end in in_features = ", options.in_features);
  return functional::linear(x, weight, bias);
}
KILN_DECL void LinearImpl::pretty_print(std::ostream& out) const {
  out << "Linear(in_features=" << options.in_features << ", out_features=" << options.out_features
      << ", bias=" << (options.bias_ ? "true" : "false") << ')';
}

KILN_DECL Tensor<float> FlattenImpl::forward(const Tensor<float>& x) { return x.flatten(start_, end_); }
KILN_DECL void FlattenImpl::pretty_print(std::ostream& out) const {
  out << "Flatten(start_dim=" << start_ << ", end_dim=" << end_ << ')';
}

KILN_DECL DropoutImpl::DropoutImpl(double p) : Module("Dropout"), p_(p) {
  check<std::invalid_argument>(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}
KILN_DECL Tensor<float> DropoutImpl::forward(const Tensor<float>& x) {
  return functional::dropout(x, p_, is_training());
}
KILN_DECL void DropoutImpl::pretty_print(std::ostream& out) const { out << "Dropout(p=" << p_ << ')'; }

KILN_DECL EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t dim) : Module("Embedding") {
  check<std::invalid_argument>(num_embeddings > 0 && dim > 0, "Embedding: sizes must be positive, got ",
                               num_embeddings, " and ", dim);
  weight = register_parameter("weight", normal_(empty<float>({num_embeddings, dim})));
}
KILN_DECL Tensor<float> EmbeddingImpl::forward(const Tensor<int64_t>& indices) {
  return functional::embedding(indices, weight);
}
KILN_DECL void EmbeddingImpl::pretty_print(std::ostream& out) const {
  out << "Embedding(" << weight.size(0) << ", " << weight.size(1) << ')';
}

KILN_DECL Tensor<float> SequentialImpl::forward(const Tensor<float>& x) {
  Tensor<float> h = x;
  for (const auto& m : *this) h = m->forward(h);
  return h;
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln::nn

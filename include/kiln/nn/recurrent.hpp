#pragma once
// nn::RNN, nn::LSTM and nn::GRU, as torch.nn's: several layers, bidirectional, batch_first, dropout between layers,
// parameters named and shaped as PyTorch's state_dict (weight_ih_l0 [G * H, H_in], weight_hh_l0 [G * H, H],
// bias_ih_l0, bias_hh_l0; the suffix _reverse for the backward direction), gates stacked in PyTorch's order (LSTM:
// input, forget, cell, output; GRU: reset, update, new), every parameter uniform in [-1/sqrt(H), 1/sqrt(H)]. Inputs
// [L, N, H_in], [N, L, H_in] with batch_first, or unbatched [L, H_in]; states [D * num_layers, N, H] (D = 2 when
// bidirectional; [D * num_layers, H] unbatched), zeros when not given; outputs [L, N, D * H] (batch_first: [N, L,
// D * H]). forward returns libtorch's tuples:
//
//   nn::LSTM lstm(nn::LSTMOptions(32, 64).num_layers(2).batch_first(true));
//   auto [out, state] = lstm(x);                     // state: (h_n, c_n)
//   nn::GRU gru(16, 32);
//   auto [y, h_n] = gru(x, h0);
//   nn::RNN rnn(nn::RNNOptions(8, 8).nonlinearity(nn::kReLU));
//
// Each layer and direction computes the input projections of every time step in one product, then per step one
// small product with weight_hh and the cell's fused elementwise kernels, without recording; one node per layer and
// direction runs backpropagation through time (detail::RecurrentLayerBackward), with weight_hh's gradient as one
// product over all steps. Every op used runs on CUDA tensors as well (module->to(kCUDA)).
// A class template, like MultiheadAttention, so that only a program that uses these modules compiles them.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/nn/layers.hpp"
#include "kiln/tensor/join.hpp"

namespace kiln::nn {

enum class RNNNonlinearity { kTanh, kReLU };
inline constexpr RNNNonlinearity kTanh = RNNNonlinearity::kTanh;
inline constexpr RNNNonlinearity kReLU = RNNNonlinearity::kReLU;

// Options of the three modules (libtorch's RNNOptions, LSTMOptions and GRUOptions; nonlinearity is RNN's only).
struct RecurrentOptions {
  RecurrentOptions(int64_t input_size, int64_t hidden_size) : input_size(input_size), hidden_size(hidden_size) {}
  int64_t input_size, hidden_size, num_layers_ = 1;
  bool bias_ = true, batch_first_ = false, bidirectional_ = false;
  double dropout_ = 0;
  RNNNonlinearity nonlinearity_ = kTanh;
  RecurrentOptions& num_layers(int64_t n) { num_layers_ = n; return *this; }
  RecurrentOptions& bias(bool b) { bias_ = b; return *this; }
  RecurrentOptions& batch_first(bool b) { batch_first_ = b; return *this; }
  RecurrentOptions& bidirectional(bool b) { bidirectional_ = b; return *this; }
  RecurrentOptions& dropout(double p) { dropout_ = p; return *this; }
  RecurrentOptions& nonlinearity(RNNNonlinearity f) { nonlinearity_ = f; return *this; }
};
using RNNOptions = RecurrentOptions;
using LSTMOptions = RecurrentOptions;
using GRUOptions = RecurrentOptions;

namespace detail {

// The recurrent state of one layer and direction: h [N, H], and c [N, H] for the LSTM.
struct RecurrentState {
  Tensor<float> h, c;
};

// Each cell: forward(x_gates, h_gates, state) makes one time step (under no-grad) from the step's input projection
// x_gates = x_t W_ih^T + b_ih [N, G * H] and h_gates = h W_hh^T + b_hh, updating the state and returning what its
// backward needs; backward(step, h_prev, dh, dc) turns the gradient of the step's new state (dh, and dc for the
// LSTM, which it moves to the previous step's cell) into the gradients of x_gates and h_gates (equal but for the
// GRU, whose reset gate scales h's projection) and the part of h_prev's gradient that does not go through h_gates.
// Gate k is columns [k H, (k + 1) H).
inline Tensor<float> gate(const Tensor<float>& gates, int k, int64_t hidden) { return gates.narrow(-1, k * hidden, hidden); }

struct GateGradients {
  Tensor<float> x_gates, h_gates, h_prev_direct;
};

struct RnnCell {
  static constexpr const char* kName = "RNN";
  static constexpr int kGates = 1;
  static constexpr bool kHasCell = false;
  struct Step {
    Tensor<float> h;
  };
  static Step forward(const Tensor<float>& xg, const Tensor<float>& hg, RecurrentState& s, int64_t, RNNNonlinearity f) {
    s.h = f == kTanh ? Tensor<float>(tanh(xg + hg)) : Tensor<float>(relu(xg + hg));
    return {s.h};
  }
  static GateGradients backward(const Step& step, const Tensor<float>&, const Tensor<float>& dh, Tensor<float>&,
                                RNNNonlinearity f) {
    const Tensor<float> d = f == kTanh ? Tensor<float>(dh * (1.0f - step.h * step.h)) : Tensor<float>(dh * sign(step.h));
    return {d, d, {}};
  }
};

struct LstmCell {
  static constexpr const char* kName = "LSTM";
  static constexpr int kGates = 4;
  static constexpr bool kHasCell = true;
  struct Step {
    Tensor<float> pre, c_prev, c;  // the gates before activation (i, f, g, o), the cell before and after
  };
  // The new cell and h in one pass (h's expression repeats c's rather than reading it back).
  static Step forward(const Tensor<float>& xg, const Tensor<float>& hg, RecurrentState& s, int64_t hidden,
                      RNNNonlinearity) {
    Step step{xg + hg, s.c, empty_like(s.c)};
    const auto c = sigmoid(gate(step.pre, 1, hidden)) * s.c + sigmoid(gate(step.pre, 0, hidden)) * tanh(gate(step.pre, 2, hidden));
    s.h = empty_like(s.c);
    eval_all({&step.c, &s.h}, c, sigmoid(gate(step.pre, 3, hidden)) * tanh(c));
    s.c = step.c;
    return step;
  }
  // The four gates' gradients and the previous cell's, in one pass.
  static GateGradients backward(const Step& st, const Tensor<float>&, const Tensor<float>& dh, Tensor<float>& dc,
                                RNNNonlinearity) {
    const int64_t hidden = st.c.size(-1);
    const auto i = sigmoid(gate(st.pre, 0, hidden)), f = sigmoid(gate(st.pre, 1, hidden)), o = sigmoid(gate(st.pre, 3, hidden));
    const auto g = tanh(gate(st.pre, 2, hidden));
    const auto tanh_c = tanh(st.c);
    const auto d_c = dc + dh * o * (1.0f - tanh_c * tanh_c);  // the cell's gradient, from after the step and via h
    Tensor<float> d = empty_like(st.pre), d_i = gate(d, 0, hidden), d_f = gate(d, 1, hidden), d_g = gate(d, 2, hidden),
                  d_o = gate(d, 3, hidden), dc_prev = empty_like(st.c);
    eval_all({&d_i, &d_f, &d_g, &d_o, &dc_prev}, d_c * g * i * (1.0f - i), d_c * st.c_prev * f * (1.0f - f),
             d_c * i * (1.0f - g * g), dh * tanh_c * o * (1.0f - o), d_c * f);
    dc = dc_prev;
    return {d, d, {}};
  }
};

struct GruCell {
  static constexpr const char* kName = "GRU";
  static constexpr int kGates = 3;
  static constexpr bool kHasCell = false;
  struct Step {
    Tensor<float> r, z, n, h_n;  // the activated gates and h's projection for n, with its bias
  };
  static Step forward(const Tensor<float>& xg, const Tensor<float>& hg, RecurrentState& s, int64_t hidden,
                      RNNNonlinearity) {
    Step step{sigmoid(gate(xg, 0, hidden) + gate(hg, 0, hidden)), sigmoid(gate(xg, 1, hidden) + gate(hg, 1, hidden)),
              {}, gate(hg, 2, hidden)};
    // n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)): the reset gate scales h's projection with its bias.
    step.n = tanh(gate(xg, 2, hidden) + step.r * step.h_n);
    s.h = (1.0f - step.z) * step.n + step.z * s.h;
    return step;
  }
  static GateGradients backward(const Step& st, const Tensor<float>& h_prev, const Tensor<float>& dh, Tensor<float>&,
                                RNNNonlinearity) {
    const Tensor<float> dn = dh * (1.0f - st.z) * (1.0f - st.n * st.n);
    const Tensor<float> dr = dn * st.h_n * st.r * (1.0f - st.r), dz = dh * (h_prev - st.n) * st.z * (1.0f - st.z);
    return {cat({dr, dz, dn}, -1), cat({dr, dz, Tensor<float>(dn * st.r)}, -1), dh * st.z};
  }
};

// The backward of one layer in one direction over all its time steps (backpropagation through time by hand): the
// steps run in reverse with one small product per step for h's gradient, and weight_hh's gradient is one product
// over every step (K = L * N), where per-step autograd made L products of K = N and L accumulations of it.
// Inputs: x_gates [L, N, G * H], h_0, c_0 (LSTM), weight_hh, bias_hh (when the module has biases); outputs: the
// hidden states [L, N, H], h_n, c_n (LSTM).
template <class Cell>
struct RecurrentLayerBackward : autograd::Node {
  std::vector<typename Cell::Step> steps;  // in time order
  std::vector<Tensor<float>> h_prev;       // the state each step started from, in time order
  autograd::SavedTensor weight_hh;
  bool reverse = false;
  RNNNonlinearity nonlinearity = kTanh;

  std::string name() const override { return std::string(Cell::kName) + "Backward"; }
  int num_outputs() const override { return Cell::kHasCell ? 3 : 2; }
  void release_saved() override {
    steps.clear();
    h_prev.clear();
    weight_hh = {};
  }
  autograd::GradList apply(autograd::GradList&& grads) override {
    NoGradGuard no_grad;
    const Tensor<float> w(weight_hh.unpack(*this));
    const int64_t length = int64_t(steps.size());
    auto given = [&](size_t i) { return i < grads.size() && grads[i] ? Tensor<float>(grads[i]) : zeros_like(h_prev[0]); };
    Tensor<float> dh = given(1), dc = Cell::kHasCell ? given(2) : Tensor<float>();
    const Tensor<float> d_out = grads.at(0) ? Tensor<float>(grads[0]) : Tensor<float>();
    std::vector<Tensor<float>> d_x(static_cast<size_t>(length)), d_h(static_cast<size_t>(length));
    for (int64_t k = 0; k < length; ++k) {
      const size_t t = size_t(reverse ? k : length - 1 - k);
      if (d_out.defined()) dh = dh + d_out.select(0, int64_t(t));
      GateGradients g = Cell::backward(steps[t], h_prev[t], dh, dc, nonlinearity);
      dh = matmul(g.h_gates, w);
      if (g.h_prev_direct.defined()) dh = dh + g.h_prev_direct;
      d_x[t] = std::move(g.x_gates);
      d_h[t] = std::move(g.h_gates);
    }
    const Tensor<float> d_gates = stack(d_h, 0).flatten(0, 1), states = stack(h_prev, 0).flatten(0, 1);
    autograd::GradList out = {stack(d_x, 0).impl_ptr(), dh.impl_ptr()};
    if (Cell::kHasCell) out.push_back(dc.impl_ptr());
    out.push_back(matmul(d_gates.t(), states).impl_ptr());
    if (int(next_edges.size()) > int(out.size())) out.push_back(Tensor<float>(sum(d_gates, 0)).impl_ptr());
    return out;
  }
};

}  // namespace detail

template <class Cell>
class RecurrentImpl : public Module {
 public:
  using Hidden = std::conditional_t<Cell::kHasCell, std::tuple<Tensor<float>, Tensor<float>>, Tensor<float>>;
  using Output = std::tuple<Tensor<float>, Hidden>;

  RecurrentImpl(int64_t input_size, int64_t hidden_size) : RecurrentImpl(RecurrentOptions(input_size, hidden_size)) {}
  explicit RecurrentImpl(const RecurrentOptions& o) : Module(Cell::kName), options(o) {
    check<std::invalid_argument>(o.input_size > 0 && o.hidden_size > 0 && o.num_layers_ > 0, Cell::kName,
                                 ": input_size, hidden_size and num_layers must be positive, got ", o.input_size, ", ",
                                 o.hidden_size, " and ", o.num_layers_);
    check<std::invalid_argument>(o.dropout_ >= 0 && o.dropout_ <= 1, Cell::kName, ": dropout must be in [0, 1], got ",
                                 o.dropout_);
    check<std::invalid_argument>(std::is_same_v<Cell, detail::RnnCell> || o.nonlinearity_ == kTanh, Cell::kName,
                                 ": nonlinearity is an option of RNN only");
    const double bound = 1 / std::sqrt(double(o.hidden_size));
    const int64_t gates = Cell::kGates * o.hidden_size;
    auto uniform = [&](const Shape& s) { return uniform_(empty<float>(s), -bound, bound); };
    for (int64_t layer = 0; layer < o.num_layers_; ++layer)
      for (int d = 0; d < directions(); ++d) {
        const std::string suffix = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
        const int64_t in = layer == 0 ? o.input_size : directions() * o.hidden_size;
        Weights w;
        w.w_ih = register_parameter("weight_ih" + suffix, uniform({gates, in}));
        w.w_hh = register_parameter("weight_hh" + suffix, uniform({gates, o.hidden_size}));
        if (o.bias_) {
          w.b_ih = register_parameter("bias_ih" + suffix, uniform({gates}));
          w.b_hh = register_parameter("bias_hh" + suffix, uniform({gates}));
        }
        weights_.push_back(w);
      }
  }

  // input [L, N, H_in] (batch_first: [N, L, H_in]) or [L, H_in]; hx: h_0 (and c_0 for the LSTM), or undefined.
  Output forward(const Tensor<float>& input, const Hidden& hx = {}) {
    const RecurrentOptions& o = options;
    check<ShapeError>((input.dim() == 2 || input.dim() == 3) && input.size(-1) == o.input_size, Cell::kName,
                      ": input of shape ", input.shape(), " must be [L, N, ", o.input_size, "]",
                      o.batch_first_ ? " with batch_first [N, L, " : " or unbatched [L, ", o.input_size, "]");
    const bool batched = input.dim() == 3;
    Tensor<float> x = !batched ? input.unsqueeze(1) : o.batch_first_ ? input.transpose(0, 1) : input;
    check<ShapeError>(x.size(0) > 0, Cell::kName, ": the input of shape ", input.shape(), " has no time steps");
    const Shape state_shape = batched ? Shape{directions() * o.num_layers_, x.size(1), o.hidden_size}
                                      : Shape{directions() * o.num_layers_, o.hidden_size};
    const Tensor<float> h0 = initial(first_of(hx), state_shape, x.device(), "h_0");
    const Tensor<float> c0 = Cell::kHasCell ? initial(second_of(hx), state_shape, x.device(), "c_0") : Tensor<float>();
    std::vector<Tensor<float>> h_n, c_n;
    for (int64_t layer = 0; layer < o.num_layers_; ++layer) {
      if (layer > 0 && o.dropout_ > 0 && is_training()) x = functional::dropout(x, o.dropout_, true);
      std::vector<Tensor<float>> outputs;
      for (int d = 0; d < directions(); ++d) {
        const int64_t index = layer * directions() + d;
        auto state_of = [&](const Tensor<float>& t) {
          if (!t.defined()) return Tensor<float>();  // c of an RNN or GRU
          return batched ? t.select(0, index) : t.select(0, index).unsqueeze(0);
        };
        detail::RecurrentState s{state_of(h0), state_of(c0)};
        outputs.push_back(run(x, s, weights_[size_t(index)], d == 1));
        h_n.push_back(batched ? s.h : s.h.squeeze(0));
        if constexpr (Cell::kHasCell) c_n.push_back(batched ? s.c : s.c.squeeze(0));
      }
      x = outputs.size() == 1 ? outputs[0] : cat(outputs, -1);
    }
    const Tensor<float> output = !batched ? x.squeeze(1) : o.batch_first_ ? x.transpose(0, 1) : x;
    if constexpr (Cell::kHasCell) return {output, {stack(h_n, 0), stack(c_n, 0)}};
    else return {output, stack(h_n, 0)};
  }

  void pretty_print(std::ostream& out) const override {
    const RecurrentOptions& o = options;
    out << Cell::kName << '(' << o.input_size << ", " << o.hidden_size;
    if (o.num_layers_ != 1) out << ", num_layers=" << o.num_layers_;
    if (o.nonlinearity_ == kReLU) out << ", nonlinearity=relu";
    if (!o.bias_) out << ", bias=false";
    if (o.batch_first_) out << ", batch_first=true";
    if (o.dropout_ != 0) out << ", dropout=" << o.dropout_;
    if (o.bidirectional_) out << ", bidirectional=true";
    out << ')';
  }

  RecurrentOptions options;

 private:
  struct Weights {
    Tensor<float> w_ih, w_hh, b_ih, b_hh;
  };
  std::vector<Weights> weights_;  // per layer and direction, in PyTorch's order

  int directions() const { return options.bidirectional_ ? 2 : 1; }

  static Tensor<float> first_of(const Hidden& hx) {
    if constexpr (Cell::kHasCell) return std::get<0>(hx);
    else return hx;
  }
  static Tensor<float> second_of(const Hidden& hx) {
    if constexpr (Cell::kHasCell) return std::get<1>(hx);
    else return {};
  }
  // A given initial state (checked against the shape the input implies), or zeros on the input's device.
  static Tensor<float> initial(const Tensor<float>& given, const Shape& shape, Device device, const char* what) {
    if (!given.defined()) return zeros<float>(shape, device);
    check<ShapeError>(given.shape() == shape, Cell::kName, ": ", what, " of shape ", given.shape(), " must be ", shape,
                      " for this input");
    check<std::invalid_argument>(given.device() == device, Cell::kName, ": ", what, " is on ", given.device().str(),
                                 " but the input is on ", device.str());
    return given;
  }

  // One layer in one direction over x [L, N, I]: the outputs [L, N, H]; s becomes the last step's state. The steps run
  // without recording; one RecurrentLayerBackward node stands for them all.
  Tensor<float> run(const Tensor<float>& x, detail::RecurrentState& s, const Weights& w, bool reverse) const {
    const int64_t steps = x.size(0), hidden = options.hidden_size;
    const Tensor<float> x_gates = functional::linear(x, w.w_ih, w.b_ih);
    const std::vector<Tensor<float>> inputs = {x_gates, s.h, s.c, w.w_hh, w.b_hh};
    const bool record = GradMode::is_enabled() && std::any_of(inputs.begin(), inputs.end(), [](const Tensor<float>& t) {
                          return t.defined() && t.requires_grad();
                        });
    std::shared_ptr<detail::RecurrentLayerBackward<Cell>> node;
    if (record) {
      node = std::make_shared<detail::RecurrentLayerBackward<Cell>>();
      node->steps.resize(size_t(steps));
      node->h_prev.resize(size_t(steps));
      node->weight_hh = autograd::SavedTensor::input(w.w_hh.impl_ptr());
      node->reverse = reverse;
      node->nonlinearity = options.nonlinearity_;
      for (const Tensor<float>& t : inputs)
        if (t.defined()) node->next_edges.push_back(autograd::gradient_edge(t.impl_ptr()));
    }
    std::vector<Tensor<float>> outputs(static_cast<size_t>(steps));
    detail::RecurrentState state{s.h.detach(), Cell::kHasCell ? s.c.detach() : Tensor<float>()};
    {
      NoGradGuard no_grad;
      for (int64_t k = 0; k < steps; ++k) {
        const size_t t = size_t(reverse ? steps - 1 - k : k);
        const Tensor<float> h_prev = state.h;
        auto step = Cell::forward(x_gates.select(0, int64_t(t)), functional::linear(state.h, w.w_hh, w.b_hh), state,
                                  hidden, options.nonlinearity_);
        outputs[t] = state.h;
        if (node) {
          node->steps[t] = std::move(step);
          node->h_prev[t] = h_prev;
        }
      }
    }
    // Fresh handles for the results: the node keeps the steps' tensors, which must not point back at it.
    const Tensor<float> output = stack(outputs, 0);
    s = {state.h.detach(), Cell::kHasCell ? state.c.detach() : Tensor<float>()};
    if (node) {
      const Tensor<float> results[] = {output, s.h, s.c};
      for (int i = 0; i < node->num_outputs(); ++i) {
        autograd::AutogradMeta& meta = autograd::meta_of(results[i].impl_ptr());
        meta.grad_fn = node;
        meta.output_nr = i;
      }
    }
    return output;
  }
};

using RNNImpl = RecurrentImpl<detail::RnnCell>;
using LSTMImpl = RecurrentImpl<detail::LstmCell>;
using GRUImpl = RecurrentImpl<detail::GruCell>;
KILN_MODULE(RNN);
KILN_MODULE(LSTM);
KILN_MODULE(GRU);

}  // namespace kiln::nn

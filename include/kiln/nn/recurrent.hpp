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
// small product with weight_hh and one fused elementwise kernel; autograd records the steps, so the backward is
// backpropagation through time. Every op used runs on CUDA tensors as well (module->to(kCUDA)).
// A class template, like MultiheadAttention, so that only a program that uses these modules compiles them.
#include <cmath>
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

// One time step of each cell: x_gates = x_t W_ih^T + b_ih [N, G * H] (computed for every step at once), h_gates =
// h W_hh^T + b_hh. Gate k is columns [k H, (k + 1) H): split by unbind, whose backward is one copy into [N, G, H].
inline std::vector<Tensor<float>> split_gates(const Tensor<float>& gates, int count, int64_t hidden) {
  return unbind(gates.reshape({gates.size(0), count, hidden}), 1);
}

struct RnnCell {
  static constexpr const char* kName = "RNN";
  static constexpr int kGates = 1;
  static constexpr bool kHasCell = false;
  static RecurrentState step(const Tensor<float>& x_gates, const Tensor<float>& h_gates, const RecurrentState&,
                             int64_t, RNNNonlinearity f) {
    return {f == kTanh ? Tensor<float>(tanh(x_gates + h_gates)) : Tensor<float>(relu(x_gates + h_gates)), {}};
  }
};

struct LstmCell {
  static constexpr const char* kName = "LSTM";
  static constexpr int kGates = 4;
  static constexpr bool kHasCell = true;
  static RecurrentState step(const Tensor<float>& x_gates, const Tensor<float>& h_gates, const RecurrentState& s,
                             int64_t hidden, RNNNonlinearity) {
    const std::vector<Tensor<float>> g = split_gates(x_gates + h_gates, kGates, hidden);  // i, f, g, o
    const Tensor<float> c = sigmoid(g[1]) * s.c + sigmoid(g[0]) * tanh(g[2]);
    return {sigmoid(g[3]) * tanh(c), c};
  }
};

struct GruCell {
  static constexpr const char* kName = "GRU";
  static constexpr int kGates = 3;
  static constexpr bool kHasCell = false;
  static RecurrentState step(const Tensor<float>& x_gates, const Tensor<float>& h_gates, const RecurrentState& s,
                             int64_t hidden, RNNNonlinearity) {
    const std::vector<Tensor<float>> x = split_gates(x_gates, kGates, hidden), h = split_gates(h_gates, kGates, hidden);
    const Tensor<float> update = sigmoid(x[1] + h[1]);
    // n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)): the reset gate scales h's projection with its bias.
    const Tensor<float> candidate = tanh(x[2] + sigmoid(x[0] + h[0]) * h[2]);
    return {(1.0f - update) * candidate + update * s.h, {}};
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

  // One layer in one direction over x [L, N, I]: the outputs [L, N, H]; s becomes the last step's state.
  Tensor<float> run(const Tensor<float>& x, detail::RecurrentState& s, const Weights& w, bool reverse) const {
    const int64_t steps = x.size(0), hidden = options.hidden_size;
    const std::vector<Tensor<float>> x_gates = unbind(functional::linear(x, w.w_ih, w.b_ih), 0);
    std::vector<Tensor<float>> outputs(static_cast<size_t>(steps));
    for (int64_t k = 0; k < steps; ++k) {
      const int64_t t = reverse ? steps - 1 - k : k;
      s = Cell::step(x_gates[size_t(t)], functional::linear(s.h, w.w_hh, w.b_hh), s, hidden, options.nonlinearity_);
      outputs[size_t(t)] = s.h;
    }
    return stack(outputs, 0);
  }
};

using RNNImpl = RecurrentImpl<detail::RnnCell>;
using LSTMImpl = RecurrentImpl<detail::LstmCell>;
using GRUImpl = RecurrentImpl<detail::GruCell>;
KILN_MODULE(RNN);
KILN_MODULE(LSTM);
KILN_MODULE(GRU);

}  // namespace kiln::nn

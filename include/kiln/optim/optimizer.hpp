#pragma once
// The optimizer base, as libtorch's torch::optim::Optimizer: parameter groups with their own options
// (lr and the rest), per-parameter state, zero_grad() and step(). Each optimizer's step updates a
// parameter and its state in one fused pass (kiln::eval_all), under a NoGradGuard.
//
// state_dict() flattens the state into named tensors (what a safetensors checkpoint holds), with
// PyTorch's names: "state.<i>.exp_avg" for the i-th parameter counted across the groups in order,
// "param_groups.<g>.lr" and "param_groups.<g>.initial_lr" as 0-d doubles. load_state_dict() expects an
// optimizer built with the same parameters and groups, as PyTorch's does.
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/core/options.hpp"
#include "kiln/tensor/any_tensor.hpp"
#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim {

// One parameter's optimizer state by name ("step", "exp_avg", ...); empty before its first update.
using ParamState = std::map<std::string, AnyTensor>;

namespace detail {
// The gradient an update uses, PyTorch's maximize: -grad to ascend, before weight decay and the rest. Off (the usual
// case) it is grad itself, so the fused update reads it with no multiply; on, -grad costs one pass of its own.
template <Dtype T>
Tensor<T> oriented_grad(const Tensor<T>& grad, bool maximize) {
  if (!maximize) return grad;
  NoGradGuard no_grad;
  return Tensor<T>(-grad);
}
}  // namespace detail

template <class Options, Dtype T>
class Optimizer {
 public:
  struct ParamGroup {
    std::vector<Tensor<T>> params;
    Options options;
    double initial_lr = -1;  // set by the first LR scheduler bound to the optimizer
  };

  Optimizer(std::vector<Tensor<T>> params, Options defaults) : defaults_(defaults) {
    add_param_group({std::move(params), defaults});
  }
  Optimizer(std::vector<ParamGroup> groups, Options defaults) : defaults_(defaults) {
    for (ParamGroup& g : groups) add_param_group(std::move(g));
  }
  virtual ~Optimizer() = default;

  void add_param_group(ParamGroup group) {
    for (const Tensor<T>& p : group.params)
      check<std::invalid_argument>(p.defined() && p.is_leaf(), "optimizer: parameters must be defined leaf tensors");
    groups_.push_back(std::move(group));
  }
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const Options& defaults() const { return defaults_; }

  // Sets every parameter's gradient to undefined (set_to_none, PyTorch's default) or to zeros.
  void zero_grad(bool set_to_none = true) {
    for (ParamGroup& g : groups_)
      for (Tensor<T>& p : g.params) p.zero_grad(set_to_none);
  }

  // One update of every parameter that has a gradient.
  void step() {
    NoGradGuard no_grad;
    for (ParamGroup& g : groups_)
      for (Tensor<T>& p : g.params) {
        Tensor<T> grad = p.grad();
        if (!grad.defined()) continue;
        check<ShapeError>(grad.shape() == p.shape(), "optimizer: the gradient's shape ", grad.shape(),
                          " differs from the parameter's ", p.shape());
        update(p, grad, g.options);
      }
  }

  std::map<std::string, AnyTensor> state_dict() const {
    std::map<std::string, AnyTensor> out;
    int64_t index = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      out.emplace(group_key(g, "lr"), full<double>({}, groups_[g].options.lr()));
      out.emplace(group_key(g, "initial_lr"), full<double>({}, groups_[g].initial_lr));
      for (const Tensor<T>& p : groups_[g].params) {
        const std::string prefix = "state." + std::to_string(index++) + ".";
        for (auto& [name, t] : param_state(p)) out.emplace(prefix + name, t);
      }
    }
    return out;
  }

  // Restores the lrs and every parameter's state (copied in); entries for other parameters, wrong
  // shapes or dtypes are refused before anything changes.
  void load_state_dict(const std::map<std::string, AnyTensor>& state) {
    std::vector<ParamState> per_param(num_params());
    std::vector<double> lr(groups_.size()), initial_lr(groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      lr[g] = scalar_entry(state, group_key(g, "lr"));
      initial_lr[g] = scalar_entry(state, group_key(g, "initial_lr"));
    }
    for (auto& [key, t] : state) {
      if (key.starts_with("param_groups.")) {
        check<std::invalid_argument>(is_group_key(key), "optimizer load_state_dict: unexpected key \"", key,
                                     "\" (the optimizer has ", groups_.size(), " groups)");
        continue;
      }
      const size_t dot = key.find('.', 6);
      check<std::invalid_argument>(key.starts_with("state.") && dot != std::string::npos,
                                   "optimizer load_state_dict: unexpected key \"", key, "\"");
      const int64_t i = parse_index(key.substr(6, dot - 6), key);
      check<std::invalid_argument>(i < int64_t(per_param.size()), "optimizer load_state_dict: \"", key,
                                   "\" names parameter ", i, " but the optimizer has ", per_param.size());
      per_param[i].emplace(key.substr(dot + 1), t);
    }
    int64_t index = 0;
    for (const ParamGroup& group : groups_)
      for (const Tensor<T>& p : group.params) {
        validate_param_state(p, group.options, per_param[index], index);
        ++index;
      }
    index = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      groups_[g].options.lr(lr[g]);
      groups_[g].initial_lr = initial_lr[g];
      for (Tensor<T>& p : groups_[g].params) set_param_state(p, per_param[index++]);
    }
  }

 protected:
  // The state of one parameter, by PyTorch's names; tensors shared with the optimizer.
  virtual ParamState param_state(const Tensor<T>& param) const = 0;
  // Replaces a parameter's state (already validated: copy the tensors in).
  virtual void set_param_state(const Tensor<T>& param, const ParamState& state) = 0;
  // The names a parameter's state holds under these options; a loaded state must have these (or none).
  virtual std::vector<std::string> state_names(const Options& options) const = 0;

  // A state tensor for `param` loaded from a checkpoint: a contiguous copy of T values on the parameter's device.
  static Tensor<T> loaded_tensor(const ParamState& state, const std::string& name, const Tensor<T>& param) {
    return state.at(name).template as<T>().clone().to(param.device());
  }
  static int64_t loaded_step(const ParamState& state) { return state.at("step").template as<int64_t>().item(); }

  virtual void update(Tensor<T>& param, const Tensor<T>& grad, const Options& options) = 0;

  // A zero-filled state tensor shaped like the parameter, on its device.
  static Tensor<T> zeros_like(const Tensor<T>& p) { return kiln::zeros_like(p); }

  Options defaults_;
  std::vector<ParamGroup> groups_;

 private:
  size_t num_params() const {
    size_t n = 0;
    for (const ParamGroup& g : groups_) n += g.params.size();
    return n;
  }
  static double scalar_entry(const std::map<std::string, AnyTensor>& state, const std::string& key) {
    auto it = state.find(key);
    check<std::invalid_argument>(it != state.end(), "optimizer load_state_dict: missing key \"", key, "\"");
    check<ShapeError>(it->second.numel() == 1, "optimizer load_state_dict: \"", key, "\" must hold one value, got shape ",
                      it->second.shape());
    // The one element read as it is stored (not through AnyTensor::to, which would compile 49 conversions).
    return kiln::detail::dispatch_dtype(it->second.dtype(), [&](auto tag) {
      return double(static_cast<compute_t<typename decltype(tag)::type>>(
          *static_cast<const typename decltype(tag)::type*>(it->second.data_ptr())));
    });
  }
  bool is_group_key(const std::string& key) const {
    for (size_t g = 0; g < groups_.size(); ++g)
      if (key == group_key(g, "lr") || key == group_key(g, "initial_lr")) return true;
    return false;
  }
  static std::string group_key(size_t group, const char* field) {
    return "param_groups." + std::to_string(group) + "." + field;
  }
  static int64_t parse_index(const std::string& digits, const std::string& key) {
    check<std::invalid_argument>(!digits.empty() && digits.size() < 10 &&
                                     digits.find_first_not_of("0123456789") == std::string::npos,
                                 "optimizer load_state_dict: unexpected key \"", key, "\"");
    return std::stoll(digits);
  }
  void validate_param_state(const Tensor<T>& p, const Options& options, const ParamState& state, int64_t index) const {
    if (state.empty()) return;
    const std::vector<std::string> names = state_names(options);
    check<std::invalid_argument>(state.size() == names.size(), "optimizer load_state_dict: parameter ", index,
                                 " has ", state.size(), " state entries, expected ", names.size());
    for (const std::string& name : names) {
      auto it = state.find(name);
      check<std::invalid_argument>(it != state.end(), "optimizer load_state_dict: parameter ", index,
                                   " lacks \"", name, "\"");
      const bool is_step = name == "step";
      check<DTypeError>(it->second.dtype() == (is_step ? ScalarType::Int64 : scalar_type_of<T>()),
                        "optimizer load_state_dict: \"state.", index, ".", name, "\" holds ",
                        dtype_name(it->second.dtype()), " values");
      check<ShapeError>(is_step ? it->second.numel() == 1 : it->second.shape() == p.shape(),
                        "optimizer load_state_dict: \"state.", index, ".", name, "\" has shape ",
                        it->second.shape(), ", the parameter ", p.shape());
    }
  }
};

}  // namespace kiln::optim

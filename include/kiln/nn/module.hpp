#pragma once
// kiln::nn::Module, as libtorch's torch::nn::Module: named parameters and buffers, submodules,
// train()/eval(), parameters(), named_parameters() ("0.weight" for nested names), zero_grad(),
// state_dict()/load_state_dict(), printing. Modules hold float tensors. A module with one input and one
// output overrides forward(x), which is what Sequential chains; ModuleHolder (KILN_MODULE) gives
// libtorch's handle style: `nn::Linear fc(784, 10); auto y = fc(x); fc->weight`.
#include <algorithm>
#include <bit>
#include <concepts>
#include <map>
#include <memory>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor/any_tensor.hpp"
#include "kiln/tensor/device_copy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

class Module {
 public:
  explicit Module(std::string name = "Module") : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The forward of a one-input module (Sequential chains these).
  KILN_DECL virtual Tensor<float> forward(const Tensor<float>&);

  KILN_DECL std::vector<Tensor<float>> parameters(bool recurse = true) const;
  KILN_DECL std::vector<std::pair<std::string, Tensor<float>>> named_parameters(bool recurse = true) const;
  KILN_DECL std::vector<std::pair<std::string, Tensor<float>>> named_buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }

  KILN_DECL void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  KILN_DECL void zero_grad(bool set_to_none = true);

  // Moves every parameter and buffer (and their gradients) to `device` in place, as libtorch's module->to(device):
  // the tensors keep their identity, so a layer's `weight` member and any other handle see the moved values.
  // Make the optimizer after the move, as in PyTorch: its state is made on the parameters' device.
  KILN_DECL void to(Device device);

  // Parameters and buffers by their dotted names (copies share storage with the module).
  KILN_DECL std::map<std::string, Tensor<float>> state_dict() const;
  // Copies the values in; strict: every entry must match a parameter or buffer and cover them all.
  KILN_DECL void load_state_dict(const std::map<std::string, Tensor<float>>& state, bool strict = true);
  // The same from entries of run-time dtypes, as files hold them (io::load_safetensors, io::Checkpoint::section),
  // converting as PyTorch's load_state_dict does where nothing is lost: a float32 entry loads as above; an
  // integer one (int32, int64) loads into a buffer when float32 holds each of its values exactly (PyTorch saves
  // BatchNorm's num_batches_tracked as int64); any other dtype, or integers for a parameter, is a DTypeError
  // naming the entry. A template only so that a braced list (`{{"w", t}}`) still means the overload above.
  template <std::same_as<std::map<std::string, AnyTensor>> State>
  void load_state_dict(const State& state, bool strict = true) {
    load_any_state_dict(state, strict);
  }

  // Puts module in the place of the child called name (libtorch's replace_module), keeping its position.
  KILN_DECL void replace_module(const std::string& name, std::shared_ptr<Module> module);
  // Removes the child called name (libtorch's unregister_module).
  KILN_DECL void unregister_module(const std::string& name);

  const std::string& name() const { return name_; }
  // One line for this module (e.g. "Linear(in_features=4, out_features=2, bias=true)").
  KILN_DECL virtual void pretty_print(std::ostream& out) const;
  KILN_DECL void print(std::ostream& out, int indent = 0) const;

 protected:
  KILN_DECL Tensor<float>& register_parameter(std::string name, Tensor<float> t, bool requires_grad = true);
  KILN_DECL Tensor<float>& register_buffer(std::string name, Tensor<float> t);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    check_new_child(name, module.get());
    children_.emplace_back(std::move(name), module);
    return module;
  }

 private:
  using Named = std::vector<std::pair<std::string, Tensor<float>>>;
  KILN_DECL void collect(Named& out, const std::string& prefix, bool recurse, Named Module::*which) const;
  KILN_DECL void load_any_state_dict(const std::map<std::string, AnyTensor>& state, bool strict);
  // A child's name is new, not empty and without a dot (which would make parameter names ambiguous).
  KILN_DECL void check_new_child(const std::string& name, const Module* module) const;
  KILN_DECL std::vector<std::pair<std::string, std::shared_ptr<Module>>>::iterator child(const std::string& name,
                                                                                         const char* op);

  std::string name_;
  bool training_ = true;
  Named parameters_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

KILN_DECL std::ostream& operator<<(std::ostream& out, const Module& m);

// A shared handle to a module implementation, as libtorch's ModuleHolder: `holder->member`,
// `holder(x)` for forward, `holder.ptr()` for the shared_ptr.
template <class Impl>
class ModuleHolder {
 public:
  template <class... Args>
    requires(!(sizeof...(Args) == 1 && (std::is_base_of_v<ModuleHolder, std::remove_cvref_t<Args>> && ...)))
  explicit ModuleHolder(Args&&... args) : impl_(std::make_shared<Impl>(std::forward<Args>(args)...)) {}
  explicit ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Impl* operator->() const { return impl_.get(); }
  Impl& operator*() const { return *impl_; }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  template <class... Args>
  auto operator()(Args&&... args) const {
    return impl_->forward(std::forward<Args>(args)...);
  }
  // Indexing of containers: list[i], dict["name"].
  template <class Key>
  decltype(auto) operator[](Key&& key) const {
    return (*impl_)[std::forward<Key>(key)];
  }

 private:
  std::shared_ptr<Impl> impl_;
};

namespace detail {
// A module handle (nn::Linear) or a shared_ptr to a module, as a shared_ptr to the base.
template <class M>
std::shared_ptr<Module> as_module(const M& module) {
  if constexpr (requires { module.ptr(); }) return std::static_pointer_cast<Module>(module.ptr());
  else return std::static_pointer_cast<Module>(module);
}
}  // namespace detail

// KILN_MODULE(Linear) declares nn::Linear as the holder of nn::LinearImpl.
#define KILN_MODULE(Name)                         \
  class Name : public ModuleHolder<Name##Impl> {  \
   public:                                        \
    using ModuleHolder<Name##Impl>::ModuleHolder; \
  }

#if KILN_HEADER_DEFINITIONS
KILN_DECL Tensor<float> Module::forward(const Tensor<float>&) {
  throw std::logic_error(name_ + " has no one-input forward");
}

KILN_DECL std::vector<Tensor<float>> Module::parameters(bool recurse) const {
  std::vector<Tensor<float>> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}
KILN_DECL std::vector<std::pair<std::string, Tensor<float>>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor<float>>> out;
  collect(out, "", recurse, &Module::parameters_);
  return out;
}
KILN_DECL std::vector<std::pair<std::string, Tensor<float>>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor<float>>> out;
  collect(out, "", recurse, &Module::buffers_);
  return out;
}

KILN_DECL void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

KILN_DECL void Module::zero_grad(bool set_to_none) {
  for (Tensor<float>& p : parameters()) p.zero_grad(set_to_none);
}

KILN_DECL void Module::to(Device device) {
  NoGradGuard no_grad;
  // Each tensor's impl takes the moved copy's memory and layout (its shape is the same).
  const auto move = [&](const Tensor<float>& t) {
    if (t.device() == device) return;
    TensorImpl& impl = t.impl();
    const Tensor<float> moved = t.detach().to(device);
    impl.storage = moved.impl().storage;
    impl.strides = moved.impl().strides;
    impl.offset = moved.impl().offset;
  };
  for (const auto& [name, t] : named_parameters()) {
    move(t);
    if (t.impl().autograd && t.impl().autograd->grad) move(Tensor<float>(t.impl().autograd->grad));
  }
  for (const auto& [name, t] : named_buffers()) move(t);
}

KILN_DECL std::map<std::string, Tensor<float>> Module::state_dict() const {
  std::map<std::string, Tensor<float>> out;
  for (auto& [name, t] : named_parameters()) out.emplace(name, t);
  for (auto& [name, t] : named_buffers()) out.emplace(name, t);
  return out;
}

KILN_DECL void Module::load_state_dict(const std::map<std::string, Tensor<float>>& state, bool strict) {
  load_any_state_dict(std::map<std::string, AnyTensor>(state.begin(), state.end()), strict);
}

KILN_DECL void Module::load_any_state_dict(const std::map<std::string, AnyTensor>& state, bool strict) {
  NoGradGuard no_grad;
  // By name, as state_dict() lists them; true for a buffer.
  std::map<std::string, std::pair<Tensor<float>, bool>> targets;
  for (auto& [name, t] : named_parameters()) targets.emplace(name, std::pair(t, false));
  for (auto& [name, t] : named_buffers()) targets.emplace(name, std::pair(t, true));
  size_t used = 0;
  for (auto& [name, target] : targets) {
    auto it = state.find(name);
    if (it == state.end()) {
      check<std::invalid_argument>(!strict, "load_state_dict: missing key \"", name, "\"");
      continue;
    }
    const AnyTensor& entry = it->second;
    check<std::invalid_argument>(entry.defined(), "load_state_dict: \"", name, "\" is undefined");
    Tensor<float> t = target.first;
    check<ShapeError>(entry.shape() == t.shape(), "load_state_dict: \"", name, "\" has shape ", entry.shape(),
                      ", the module's ", t.shape());
    if (entry.is<float>()) {
      t.copy_(entry.as<float>());
    } else {
      // PyTorch copies across dtypes; kiln where nothing is lost: integers into a buffer, each value exact.
      const bool integer = entry.is<int64_t>() || entry.is<int32_t>();
      check<DTypeError>(integer && target.second, "load_state_dict: \"", name, "\" holds ", dtype_name(entry.dtype()),
                        " values, the module's ", target.second ? "buffer" : "parameter", " float32",
                        integer ? " (integer values load into buffers only)" : "; convert the entry first");
      const Tensor<int64_t> values = (entry.is<int64_t>() ? entry.as<int64_t>() : entry.as<int32_t>().to<int64_t>())
                                         .contiguous();
      for (const int64_t v : std::span(values.data_ptr(), size_t(values.numel()))) {
        // float32 holds v exactly when v has at most 24 significant bits.
        const uint64_t m = v < 0 ? 0 - uint64_t(v) : uint64_t(v);
        check<DTypeError>(m == 0 || (m >> std::countr_zero(m)) < (uint64_t(1) << 24), "load_state_dict: \"", name,
                          "\" holds the ", dtype_name(entry.dtype()), " value ", v,
                          ", which float32 cannot represent exactly");
      }
      t.copy_(values.to<float>());
    }
    ++used;
  }
  check<std::invalid_argument>(!strict || used == state.size(), "load_state_dict: ", state.size() - used,
                               " unexpected key(s)");
}

KILN_DECL void Module::pretty_print(std::ostream& out) const { out << name_; }

KILN_DECL void Module::print(std::ostream& out, int indent) const {
  pretty_print(out);
  if (children_.empty()) return;
  out << "(\n";
  for (auto& [name, child] : children_) {
    out << std::string(size_t(indent + 2), ' ') << '(' << name << "): ";
    child->print(out, indent + 2);
    out << '\n';
  }
  out << std::string(size_t(indent), ' ') << ')';
}

KILN_DECL void Module::check_new_child(const std::string& name, const Module* module) const {
  check<std::invalid_argument>(module != nullptr, name_, ": register_module(\"", name, "\") got no module");
  check<std::invalid_argument>(!name.empty() && name.find('.') == std::string::npos, name_,
                               ": a submodule's name must be non-empty and without '.', got \"", name, '"');
  for (const auto& [existing, child] : children_)
    check<std::invalid_argument>(existing != name, name_, ": a submodule \"", name, "\" is already registered");
}
KILN_DECL std::vector<std::pair<std::string, std::shared_ptr<Module>>>::iterator Module::child(const std::string& name,
                                                                                             const char* op) {
  const auto it = std::find_if(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  check<std::invalid_argument>(it != children_.end(), name_, ": ", op, ": no submodule \"", name, '"');
  return it;
}
KILN_DECL void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  check<std::invalid_argument>(module != nullptr, name_, ": replace_module(\"", name, "\") got no module");
  child(name, "replace_module")->second = std::move(module);
}
KILN_DECL void Module::unregister_module(const std::string& name) { children_.erase(child(name, "unregister_module")); }

KILN_DECL Tensor<float>& Module::register_parameter(std::string name, Tensor<float> t, bool requires_grad) {
  if (requires_grad) t.requires_grad_();
  parameters_.emplace_back(std::move(name), std::move(t));
  return parameters_.back().second;
}
KILN_DECL Tensor<float>& Module::register_buffer(std::string name, Tensor<float> t) {
  buffers_.emplace_back(std::move(name), std::move(t));
  return buffers_.back().second;
}

KILN_DECL void Module::collect(Named& out, const std::string& prefix, bool recurse, Named Module::*which) const {
  for (auto& [name, t] : this->*which) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (auto& [name, child] : children_) child->collect(out, prefix + name + ".", true, which);
}

KILN_DECL std::ostream& operator<<(std::ostream& out, const Module& m) {
  m.print(out);
  return out;
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln::nn

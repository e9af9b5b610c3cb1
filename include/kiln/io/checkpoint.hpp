#pragma once
// Checkpoints: several state_dicts (model, optimizer, scheduler, generator, counters) in one safetensors
// file, each under its own prefix ("model.0.weight", "optimizer.state.3.exp_avg", "scheduler.last_epoch").
// save() writes atomically (io/atomic_file.hpp): a crash leaves the previous checkpoint whole.
//
//   io::Checkpoint ckpt;
//   ckpt.put("model", model->state_dict()).put("optimizer", opt.state_dict()).put("epoch", full<int64_t>({}, e));
//   ckpt.save("run.safetensors");
//   auto back = io::Checkpoint::load("run.safetensors");
//   model->load_state_dict(back.section<float>("model")); opt.load_state_dict(back.section("optimizer"));
#include <filesystem>
#include <map>
#include <string>

#include "kiln/core/generator.hpp"
#include "kiln/io/safetensors.hpp"

namespace kiln::io {

class Checkpoint {
 public:
  // One tensor under its own name.
  Checkpoint& put(const std::string& name, const AnyTensor& tensor) {
    check<std::invalid_argument>(tensor.defined(), "Checkpoint::put: \"", name, "\" is undefined");
    tensors_[name] = tensor;
    return *this;
  }
  // A state_dict under prefix: "prefix.key" for each key.
  template <class Tensors>
    requires requires(const Tensors& state) { state.begin()->second; }
  Checkpoint& put(const std::string& prefix, const Tensors& state) {
    for (const auto& [key, t] : state) put(prefix + "." + key, AnyTensor(t));
    return *this;
  }

  const AnyTensor& get(const std::string& name) const {
    auto it = tensors_.find(name);
    check<std::invalid_argument>(it != tensors_.end(), "Checkpoint: no entry \"", name, "\"");
    return it->second;
  }
  bool contains(const std::string& name) const { return tensors_.contains(name); }

  // The entries under prefix, with the prefix taken off (what load_state_dict takes).
  std::map<std::string, AnyTensor> section(const std::string& prefix) const {
    std::map<std::string, AnyTensor> out;
    const std::string head = prefix + ".";
    for (auto it = tensors_.lower_bound(head); it != tensors_.end() && it->first.starts_with(head); ++it)
      out.emplace(it->first.substr(head.size()), it->second);
    return out;
  }
  // The same, as Tensor<T>: DTypeError naming the entry when one holds another dtype. A module takes section(prefix)
  // itself, which also loads integer buffers such as PyTorch's int64 num_batches_tracked (nn::Module::load_state_dict).
  template <Dtype T>
  std::map<std::string, Tensor<T>> section(const std::string& prefix) const {
    std::map<std::string, Tensor<T>> out;
    for (auto& [key, t] : section(prefix)) {
      check<DTypeError>(t.template is<T>(), "Checkpoint: \"", prefix, ".", key, "\" holds ", dtype_name(t.dtype()),
                        " values, expected ", dtype_name(scalar_type_of<T>()));
      out.emplace(key, t.template as<T>());
    }
    return out;
  }

  // A generator's seed and offset, as two int64 (bit patterns of the unsigned values).
  Checkpoint& put(const std::string& prefix, const Generator& gen) {
    const PhiloxState s = gen.state();
    put(prefix + ".seed", AnyTensor(full<int64_t>({}, int64_t(s.seed))));
    return put(prefix + ".offset", AnyTensor(full<int64_t>({}, int64_t(s.counter))));
  }
  void restore(const std::string& prefix, Generator& gen) const {
    gen.manual_seed(uint64_t(scalar<int64_t>(prefix + ".seed")));
    gen.set_offset(uint64_t(scalar<int64_t>(prefix + ".offset")));
  }

  // A one-element entry's value.
  template <Dtype T>
  T scalar(const std::string& name) const {
    const AnyTensor& t = get(name);
    check<DTypeError>(t.is<T>() && t.numel() == 1, "Checkpoint: \"", name, "\" must hold one ",
                      dtype_name(scalar_type_of<T>()), ", got ", dtype_name(t.dtype()), " of shape ", t.shape());
    return t.as<T>().reshape({}).item();
  }

  const std::map<std::string, AnyTensor>& tensors() const { return tensors_; }
  std::map<std::string, std::string>& metadata() { return metadata_; }

  void save(const std::filesystem::path& path) const { save_safetensors(path, tensors_, metadata_); }
  static Checkpoint load(const std::filesystem::path& path) {
    SafetensorsFile file = read_safetensors(path);
    Checkpoint c;
    c.tensors_ = std::move(file.tensors);
    c.metadata_ = std::move(file.metadata);
    return c;
  }

 private:
  std::map<std::string, AnyTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace kiln::io

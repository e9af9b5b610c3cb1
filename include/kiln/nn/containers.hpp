#pragma once
// ModuleList and ModuleDict, as libtorch's: containers that register what they hold as submodules (so parameters(),
// state_dict(), train()/eval() and to(device) reach it: "layers.0.weight", "heads.cls.bias") and have no forward
// of their own; the owning module decides how to call them.
//
//   nn::ModuleList blocks;
//   for (int i = 0; i < 4; ++i) blocks->push_back(nn::Linear(64, 64));
//   for (const auto& block : *blocks) h = block->forward(h);
//   nn::ModuleDict heads({{"cls", nn::Linear(64, 10).ptr()}, {"box", nn::Linear(64, 4).ptr()}});
//   auto cls = heads->ptr<nn::LinearImpl>("cls");
#include <initializer_list>
#include <memory>
#include <ranges>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/module.hpp"

namespace kiln::nn {

namespace detail {
// The module as an M, or std::invalid_argument naming the container, the entry and what it is.
template <class M>
std::shared_ptr<M> module_as(const std::shared_ptr<Module>& module, const char* container, const std::string& entry) {
  std::shared_ptr<M> out = std::dynamic_pointer_cast<M>(module);
  check<std::invalid_argument>(out != nullptr, container, ": ", entry, " is a ", module->name(),
                               ", not the module type asked for");
  return out;
}
}  // namespace detail

// Modules registered as "0", "1", ... in order.
class ModuleListImpl : public Module {
 public:
  using Item = std::pair<std::string, std::shared_ptr<Module>>;
  ModuleListImpl() : Module("ModuleList") {}
  template <class... M>
  explicit ModuleListImpl(M&&... modules) : Module("ModuleList") {
    (push_back(std::forward<M>(modules)), ...);
  }
  template <class Holder>
  void push_back(const Holder& module) {
    push_back(detail::as_module(module));
  }
  KILN_DECL void push_back(std::shared_ptr<Module> module);
  // Appends every module of other (shared, not copied).
  KILN_DECL void extend(const ModuleListImpl& other);

  size_t size() const { return named_children().size(); }
  bool is_empty() const { return named_children().empty(); }
  // The i-th module; std::out_of_range past the end.
  KILN_DECL const std::shared_ptr<Module>& operator[](size_t i) const;
  const std::shared_ptr<Module>& ptr(size_t i) const { return (*this)[i]; }
  // The i-th module as an M (nn::LinearImpl); std::invalid_argument when it is another type.
  template <class M>
  std::shared_ptr<M> ptr(size_t i) const {
    return detail::module_as<M>((*this)[i], "ModuleList", "module " + std::to_string(i));
  }
  template <class M>
  M& at(size_t i) const {
    return *ptr<M>(i);
  }
  // The modules in order (the registered children, so replace_module shows here and in forward).
  auto begin() const { return std::views::values(named_children()).begin(); }
  auto end() const { return std::views::values(named_children()).end(); }

 protected:
  // For lists with a forward of their own (Sequential): an empty list under another name.
  struct Named {
    const char* name;
  };
  explicit ModuleListImpl(Named named) : Module(named.name) {}
};
KILN_MODULE(ModuleList);

// Modules by name, in insertion order; the names are the submodules' names.
class ModuleDictImpl : public Module {
 public:
  using Item = std::pair<std::string, std::shared_ptr<Module>>;
  ModuleDictImpl() : Module("ModuleDict") {}
  KILN_DECL explicit ModuleDictImpl(const std::vector<Item>& items);
  // Adds module under key, or replaces the module held there (keeping its position), as PyTorch's dict[key] = m.
  template <class Holder>
  void insert(const std::string& key, const Holder& module) {
    insert(key, detail::as_module(module));
  }
  KILN_DECL void insert(const std::string& key, std::shared_ptr<Module> module);
  // insert for each of other's entries, in its order.
  KILN_DECL void update(const ModuleDictImpl& other);
  // Removes key's module and returns it; std::out_of_range when there is none.
  KILN_DECL std::shared_ptr<Module> pop(const std::string& key);
  KILN_DECL void clear();

  size_t size() const { return named_children().size(); }
  bool is_empty() const { return named_children().empty(); }
  KILN_DECL bool contains(const std::string& key) const;
  KILN_DECL std::vector<std::string> keys() const;
  KILN_DECL std::vector<std::shared_ptr<Module>> values() const;
  const std::vector<Item>& items() const { return named_children(); }
  // key's module; std::out_of_range naming the keys held when there is none.
  KILN_DECL const std::shared_ptr<Module>& operator[](const std::string& key) const;
  template <class M>
  std::shared_ptr<M> ptr(const std::string& key) const {
    return detail::module_as<M>((*this)[key], "ModuleDict", "\"" + key + "\"");
  }
  template <class M>
  M& at(const std::string& key) const {
    return *ptr<M>(key);
  }
  auto begin() const { return named_children().begin(); }
  auto end() const { return named_children().end(); }
};
// (KILN_MODULE's holder, plus a constructor from a braced list of {key, module} pairs)
class ModuleDict : public ModuleHolder<ModuleDictImpl> {
 public:
  using ModuleHolder<ModuleDictImpl>::ModuleHolder;
  ModuleDict() = default;
  ModuleDict(std::initializer_list<ModuleDictImpl::Item> items)
      : ModuleHolder(std::make_shared<ModuleDictImpl>(std::vector<ModuleDictImpl::Item>(items))) {}
};

#if KILN_HEADER_DEFINITIONS
KILN_DECL void ModuleListImpl::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
}
KILN_DECL void ModuleListImpl::extend(const ModuleListImpl& other) {
  const std::vector<Item> items = other.named_children();  // (a copy: other may be this list)
  for (const auto& [name, module] : items) push_back(module);
}
KILN_DECL const std::shared_ptr<Module>& ModuleListImpl::operator[](size_t i) const {
  check<std::out_of_range>(i < size(), "ModuleList: index ", i, " is out of range for ", size(), " modules");
  return named_children()[i].second;
}

KILN_DECL ModuleDictImpl::ModuleDictImpl(const std::vector<Item>& items) : Module("ModuleDict") {
  for (const auto& [key, module] : items) insert(key, module);
}
KILN_DECL void ModuleDictImpl::insert(const std::string& key, std::shared_ptr<Module> module) {
  if (contains(key)) replace_module(key, std::move(module));
  else register_module(key, std::move(module));
}
KILN_DECL void ModuleDictImpl::update(const ModuleDictImpl& other) {
  const std::vector<Item> items = other.items();  // (a copy: other may be this dict)
  for (const auto& [key, module] : items) insert(key, module);
}
KILN_DECL std::shared_ptr<Module> ModuleDictImpl::pop(const std::string& key) {
  std::shared_ptr<Module> module = (*this)[key];
  unregister_module(key);
  return module;
}
KILN_DECL void ModuleDictImpl::clear() {
  for (const std::string& key : keys()) unregister_module(key);
}
KILN_DECL bool ModuleDictImpl::contains(const std::string& key) const {
  for (const auto& [name, module] : named_children())
    if (name == key) return true;
  return false;
}
KILN_DECL std::vector<std::string> ModuleDictImpl::keys() const {
  std::vector<std::string> out;
  for (const auto& [name, module] : named_children()) out.push_back(name);
  return out;
}
KILN_DECL std::vector<std::shared_ptr<Module>> ModuleDictImpl::values() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, module] : named_children()) out.push_back(module);
  return out;
}
KILN_DECL const std::shared_ptr<Module>& ModuleDictImpl::operator[](const std::string& key) const {
  for (const auto& [name, module] : named_children())
    if (name == key) return module;
  std::string held;
  for (const auto& [name, module] : named_children()) held += (held.empty() ? "\"" : ", \"") + name + "\"";
  throw std::out_of_range("ModuleDict: no module \"" + key + "\" (it holds " + (held.empty() ? "none" : held) + ")");
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln::nn

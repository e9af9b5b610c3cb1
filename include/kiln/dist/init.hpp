#pragma once
// The default process group, as torch.distributed's module-level functions:
//
//   #include <kiln/dist/mpi.hpp>                         // registers the "mpi" backend
//   auto& pg = kiln::dist::init_process_group("mpi", std::chrono::seconds(60));
//   ... pg.all_reduce(t) ...
//   kiln::dist::destroy_process_group();
//
// Backends register themselves by name when their header is included (register_backend), so this header
// includes none of them and the order of includes does not matter.
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/dist/process_group.hpp"

namespace kiln::dist {

using BackendFactory = std::function<std::shared_ptr<ProcessGroup>(const ProcessGroupOptions&)>;

namespace detail {
struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> backends;
  std::shared_ptr<ProcessGroup> default_group;
};
inline Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace detail

// Makes a backend available to init_process_group(name, ...). Returns true (for an inline variable's initializer).
inline bool register_backend(const std::string& name, BackendFactory factory) {
  detail::Registry& r = detail::registry();
  std::lock_guard lock(r.mutex);
  r.backends[name] = std::move(factory);
  return true;
}

namespace detail {
// Whether backend `name` is registered (its header was included).
inline bool backend_registered(const std::string& name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.backends.count(name) > 0;
}

// The factory of the registered backend `backend`; throws naming the registered ones.
inline BackendFactory factory_of(const std::string& backend) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.backends.find(backend);
  if (it == r.backends.end()) {
    std::string known;
    for (auto& [name, f] : r.backends) known += (known.empty() ? "" : ", ") + name;
    throw std::invalid_argument(kiln::detail::cat(
        "init_process_group: unknown backend \"", backend, "\" (registered: ", known.empty() ? "none" : known,
        "); include <kiln/dist/mpi.hpp> for \"mpi\", <kiln/dist/nccl.hpp> for \"nccl\""));
  }
  return it->second;
}

// A new group of the registered backend `backend` over every process of the job (not the default group).
inline std::shared_ptr<ProcessGroup> new_group(const std::string& backend, const ProcessGroupOptions& options) {
  return factory_of(backend)(options);
}
}  // namespace detail

// Creates the default group over every process of the job (rank and size from the launcher).
inline ProcessGroup& init_process_group(const std::string& backend, ProcessGroupOptions options = {}) {
  const BackendFactory factory = detail::factory_of(backend);
  detail::Registry& r = detail::registry();
  {
    std::lock_guard lock(r.mutex);
    check<std::logic_error>(!r.default_group, "init_process_group: the default process group is already initialized (",
                            r.default_group ? r.default_group->backend() : "", "); call destroy_process_group() first");
  }
  std::shared_ptr<ProcessGroup> group = factory(options);
  std::lock_guard lock(r.mutex);
  r.default_group = std::move(group);
  return *r.default_group;
}
inline ProcessGroup& init_process_group(const std::string& backend, std::chrono::milliseconds timeout) {
  return init_process_group(backend, ProcessGroupOptions{.timeout = timeout});
}

inline bool is_initialized() {
  detail::Registry& r = detail::registry();
  std::lock_guard lock(r.mutex);
  return bool(r.default_group);
}

inline std::shared_ptr<ProcessGroup> default_process_group_ptr() {
  detail::Registry& r = detail::registry();
  std::lock_guard lock(r.mutex);
  check<std::logic_error>(bool(r.default_group),
                          "kiln::dist: the default process group is not initialized; call init_process_group first");
  return r.default_group;
}
inline ProcessGroup& default_process_group() { return *default_process_group_ptr(); }
inline int get_rank() { return default_process_group().rank(); }
inline int get_world_size() { return default_process_group().size(); }

// Releases the default group (its communicator; after a DistError it is abandoned rather than freed, since
// freeing it could wait for the peers that failed). Other handles to the group keep it alive.
inline void destroy_process_group() {
  detail::Registry& r = detail::registry();
  std::shared_ptr<ProcessGroup> group;
  {
    std::lock_guard lock(r.mutex);
    group = std::move(r.default_group);
  }
}

}  // namespace kiln::dist

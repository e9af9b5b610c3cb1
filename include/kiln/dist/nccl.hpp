#pragma once
// The NCCL backend of kiln::dist::ProcessGroup (CUDA tensors). Including this header registers the backend "nccl"
// for init_process_group; NcclProcessGroup can also be made directly:
//
//   mpirun -np 8 ./train                 // with <kiln/dist/mpi.hpp> included: rank 0's NCCL id goes over MPI
//   RANK=0 WORLD_SIZE=2 KILN_STORE_PATH=/shared/job42.id ./train &   // or torchrun-style: the id goes through a
//   RANK=1 WORLD_SIZE=2 KILN_STORE_PATH=/shared/job42.id ./train     // file on a path every rank sees
//   auto& pg = kiln::dist::init_process_group("nccl", std::chrono::seconds(60));
//
//   kiln::dist::NcclProcessGroup pg(options, rank, size, "/shared/job42.id");   // a file store
//   kiln::dist::NcclProcessGroup pg(options, mpi_group);                         // the id over a CPU group
//
// Each rank uses one device: options.device, or LOCAL_RANK (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK under mpirun)
// modulo the devices. Tensors must be contiguous CUDA tensors on that device (torch's NCCL backend asks the same).
// NCCL (libnccl.so.2, 2.14 or later) is loaded at run time (nccl_api.hpp); the build needs -DKILN_WITH_CUDA only.
//
// Every collective runs on the group's own stream, after the work already queued on the thread's current stream
// (so it reads what the kernels before it wrote, and compute queued after it overlaps the transfer); Work::wait()
// returns once the transfer is done. The communicator is non-blocking (ncclConfig_t.blocking = 0): every NCCL call
// returns at once, and its enqueue, then its completion, are polled against the group's timeout
// (ncclCommGetAsyncError, then an event on the stream). A rank that exits or hangs therefore makes the others
// throw DistError after the timeout instead of hanging in NCCL; the communicator is then aborted (ncclCommAbort)
// and every later call throws. NCCL matches sends and receives by their order between two ranks: tags are
// accepted and not sent. The file store's path must not hold a file from an earlier job (rank 0 removes it once
// every rank joined). Calls must come from one thread at a time.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

#ifndef KILN_WITH_CUDA
#error "<kiln/dist/nccl.hpp> needs CUDA tensors: build with -DKILN_WITH_CUDA (docs/cuda.md)"
#endif
#include "kiln/kiln.hpp"  // (with KILN_WITH_CUDA: the CUDA backend too)
#include "kiln/dist/arguments.hpp"
#include "kiln/dist/init.hpp"
#include "kiln/dist/nccl_api.hpp"
#include "kiln/dist/polled_work.hpp"
#include "kiln/dist/process_group.hpp"

namespace kiln::dist {

namespace detail {

inline std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  check<std::invalid_argument>(*end == '\0', "kiln::dist: environment variable ", name, "=\"", v,
                               "\" is not an integer");
  return int(x);
}

// Rank 0's NCCL id through a file every rank sees: rank 0 writes it atomically (a temporary file renamed), the
// others wait for it until the deadline.
class FileStore {
 public:
  static constexpr const char* kMagic = "kiln-nccl-id-1\n";

  static void publish(const std::string& path, const nccl::UniqueId& id) {
    const std::string tmp = kiln::detail::cat(path, ".tmp.", ::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(kMagic, std::streamsize(std::strlen(kMagic)));
      out.write(id.internal, sizeof id.internal);
      out.flush();
      check<std::runtime_error>(bool(out), "init_process_group: cannot write the NCCL id to ", tmp);
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    check<std::runtime_error>(!ec, "init_process_group: cannot rename ", tmp, " to ", path, ": ", ec.message());
  }

  static nccl::UniqueId fetch(const std::string& path, int rank, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (std::optional<nccl::UniqueId> id = read(path)) return *id;
      if (std::chrono::steady_clock::now() > deadline)
        throw DistError("init_process_group", rank, kiln::detail::cat(
            "rank 0 did not publish the NCCL id at ", path, " within ", timeout.count(),
            " ms (is rank 0 running, with the same KILN_STORE_PATH on a path both see?)"));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  static std::optional<nccl::UniqueId> read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::string magic(std::strlen(kMagic), '\0');
    nccl::UniqueId id;
    in.read(magic.data(), std::streamsize(magic.size()));
    in.read(id.internal, sizeof id.internal);
    check<std::runtime_error>(in && magic == kMagic, "init_process_group: ", path,
                              " is not a NCCL id written by kiln (a stale or foreign file?)");
    return id;
  }
};

// The group's communicator, aborted at the first failure.
struct NcclCommState : CommState {
  nccl::Comm comm = nullptr;
  cuda::DeviceContext* context = nullptr;
  cuda::StreamId stream = 0;  // the group's own stream

  // The communicator's pending error: kSuccess, kInProgress (the last call is still being enqueued) or a failure
  // (kInvalidUsage once the communicator is gone).
  nccl::Result async_error() {
    if (!comm) return nccl::kInvalidUsage;
    nccl::Result r = nccl::kSuccess;
    const nccl::Result rc = nccl::Library::get().comm_get_async_error(comm, &r);
    return rc != nccl::kSuccess ? rc : r;
  }
  std::string describe(nccl::Result r) {
    return comm ? nccl::Library::get().error(r, comm) : "the communicator was destroyed or aborted";
  }

 protected:
  void abort_communicator() override {
    if (comm) nccl::Library::get().comm_abort(comm);
    comm = nullptr;
  }
};

// One operation's place on the group's stream: an event recorded once NCCL has enqueued it.
struct NcclPending {
  std::shared_ptr<NcclCommState> state;
  uintptr_t event = 0;
  ~NcclPending() {
    if (event) state->context->release(event);
  }
  // Whether NCCL finished enqueueing it (the event is then recorded); a failure goes to *error.
  bool enqueued(std::string* error) {
    if (event) return true;
    const nccl::Result r = state->async_error();
    if (r == nccl::kInProgress) return false;
    if (r != nccl::kSuccess) {
      *error = kiln::detail::cat("NCCL reported an error on rank ", state->rank, ": ", state->describe(r));
      return false;
    }
    event = state->context->record_event(state->stream);
    return true;
  }
  bool complete(std::string* error) {
    if (!enqueued(error)) return false;
    if (state->context->done(event)) return true;
    const nccl::Result r = state->async_error();
    if (r != nccl::kSuccess && r != nccl::kInProgress)
      *error = kiln::detail::cat("NCCL reported an error on rank ", state->rank, ": ", state->describe(r));
    return false;
  }
};

}  // namespace detail

class NcclProcessGroup : public ProcessGroup {
 public:
  // Rank 0's id through a file at store_path (a file store).
  NcclProcessGroup(ProcessGroupOptions options, int rank, int size, const std::string& store_path)
      : NcclProcessGroup(options, rank, size, [&](nccl::UniqueId& id) {
          if (rank == 0) detail::FileStore::publish(store_path, id);
          else id = detail::FileStore::fetch(store_path, rank, options.timeout);
        }) {
    if (rank == 0) std::filesystem::remove(store_path);  // every rank has joined, so read it
  }
  // Rank 0's id broadcast through `bootstrap`, a group over the same processes (its rank and size are used).
  NcclProcessGroup(ProcessGroupOptions options, ProcessGroup& bootstrap)
      : NcclProcessGroup(options, bootstrap.rank(), bootstrap.size(), [&](nccl::UniqueId& id) {
          // (as 32 int32 words: kiln has no byte dtype)
          Tensor<int32_t> words = empty<int32_t>({int64_t(sizeof id.internal / 4)});
          std::memcpy(words.data_ptr(), id.internal, sizeof id.internal);
          words = words.to(bootstrap.device());
          bootstrap.broadcast(words, 0);
          std::memcpy(id.internal, words.cpu().data_ptr(), sizeof id.internal);
        }) {}

  // A group of this process alone (rank 0 of 1).
  explicit NcclProcessGroup(ProcessGroupOptions options = {})
      : NcclProcessGroup(options, 0, 1, [](nccl::UniqueId&) {}) {}

  ~NcclProcessGroup() override {
    pending_.reset();
    if (state_->aborted || !state_->comm) return;
    // Finalize (flushes the operations in flight) against the timeout, then destroy; abort instead when it fails.
    nccl::Library& lib = nccl::Library::get();
    state_->context->make_current();
    nccl::Result r = lib.comm_finalize(state_->comm);
    const auto deadline = std::chrono::steady_clock::now() + state_->timeout;
    while (r == nccl::kInProgress && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      r = state_->async_error();
    }
    if (r == nccl::kSuccess) lib.comm_destroy(state_->comm);
    else lib.comm_abort(state_->comm);
    state_->comm = nullptr;  // (a Work that outlives the group then fails instead of touching it)
  }

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  std::string backend() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return state_->timeout; }
  bool aborted() const override { return state_->aborted; }
  Device device() const override { return Device(kCUDA, state_->context->index()); }
  // The stream the collectives run on.
  cuda::CUDAStream stream() const { return cuda::CUDAStream(state_->context->index(), state_->stream); }
  [[noreturn]] void abort_job(int exit_code) override {
    if (state_->comm) nccl::Library::get().comm_abort(state_->comm);
    std::_Exit(exit_code);
  }

  std::shared_ptr<Work> all_reduce_async(const AnyTensor& t, ReduceOp op = ReduceOp::sum) override {
    const char* name = "all_reduce";
    const nccl::RedOp rop = prepare(name, {t}, op);
    return start(name, t, {t}, {t}, [&](nccl::Comm c, nccl::Stream s) {
      return lib().all_reduce(address(t), address(t), size_t(t.numel()), nccl::data_type(t.dtype()), rop, c, s);
    });
  }

  std::shared_ptr<Work> broadcast_async(const AnyTensor& t, int root = 0) override {
    const char* name = "broadcast";
    prepare(name, {t}, std::nullopt, root);
    return start(name, t, {t}, rank() == root ? std::vector<AnyTensor>{} : std::vector<AnyTensor>{t},
                 [&](nccl::Comm c, nccl::Stream s) {
                   return lib().broadcast(address(t), address(t), size_t(t.numel()), nccl::data_type(t.dtype()),
                                          root, c, s);
                 });
  }

  std::shared_ptr<Work> reduce_async(const AnyTensor& t, int root = 0, ReduceOp op = ReduceOp::sum) override {
    const char* name = "reduce";
    const nccl::RedOp rop = prepare(name, {t}, op, root);
    return start(name, t, {t}, rank() == root ? std::vector<AnyTensor>{t} : std::vector<AnyTensor>{},
                 [&](nccl::Comm c, nccl::Stream s) {
                   return lib().reduce(address(t), address(t), size_t(t.numel()), nccl::data_type(t.dtype()), rop,
                                       root, c, s);
                 });
  }

  std::shared_ptr<Work> all_gather_async(const AnyTensor& output, const AnyTensor& input) override {
    const char* name = "all_gather";
    prepare(name, {output, input});
    detail::check_all_gather_sizes(name, output, input, size());
    return start(name, input, {input, output}, {output}, [&](nccl::Comm c, nccl::Stream s) {
      return lib().all_gather(address(input), address(output), size_t(input.numel()),
                              nccl::data_type(input.dtype()), c, s);
    });
  }

  std::shared_ptr<Work> reduce_scatter_async(const AnyTensor& output, const AnyTensor& input,
                                             ReduceOp op = ReduceOp::sum) override {
    const char* name = "reduce_scatter";
    const nccl::RedOp rop = prepare(name, {output, input}, op);
    detail::check_reduce_scatter_sizes(name, output, input, size());
    return start(name, output, {input, output}, {output}, [&](nccl::Comm c, nccl::Stream s) {
      return lib().reduce_scatter(address(input), address(output), size_t(output.numel()),
                                  nccl::data_type(input.dtype()), rop, c, s);
    });
  }

  // NCCL has no all_to_all: a send and a receive to and from every rank, in one NCCL group.
  std::shared_ptr<Work> all_to_all_async(const AnyTensor& output, const AnyTensor& input) override {
    const char* name = "all_to_all";
    prepare(name, {output, input});
    detail::check_all_to_all_sizes(name, output, input, size());
    const size_t chunk = size_t(input.numel() / size()), bytes = chunk * input.element_size();
    const nccl::DataType dt = nccl::data_type(input.dtype());
    return start(name, input, {input, output}, {output}, [&](nccl::Comm c, nccl::Stream s) {
      nccl::Result r = lib().group_start();
      for (int peer = 0; peer < size() && r == nccl::kSuccess; ++peer) {
        r = lib().send(static_cast<const char*>(address(input)) + size_t(peer) * bytes, chunk, dt, peer, c, s);
        if (r == nccl::kSuccess || r == nccl::kInProgress)
          r = lib().recv(static_cast<char*>(address(output)) + size_t(peer) * bytes, chunk, dt, peer, c, s);
      }
      const nccl::Result end = lib().group_end();
      return r == nccl::kSuccess || r == nccl::kInProgress ? end : r;
    });
  }

  // A one-element all_reduce, as torch's NCCL backend does.
  std::shared_ptr<Work> barrier_async() override {
    const char* name = "barrier";
    state_->check_usable(name);
    if (check_shapes_) agree(name, detail::kBarrierKey);
    return start(name, AnyTensor(), {barrier_word_}, {}, [&](nccl::Comm c, nccl::Stream s) {
      return lib().all_reduce(address(barrier_word_), address(barrier_word_), 1, nccl::kFloat32, nccl::kSum, c, s);
    });
  }

  std::shared_ptr<Work> send_async(const AnyTensor& t, int dst, int tag = 0) override {
    const char* name = "send";
    detail::check_peer(name, dst, tag, rank(), size());
    state_->check_usable(name);
    check_tensor(name, t);
    return start(name, t, {t}, {}, [&](nccl::Comm c, nccl::Stream s) {
      return lib().send(address(t), size_t(t.numel()), nccl::data_type(t.dtype()), dst, c, s);
    }, dst, tag);
  }

  std::shared_ptr<Work> recv_async(const AnyTensor& t, int src, int tag = 0) override {
    const char* name = "recv";
    detail::check_peer(name, src, tag, rank(), size());
    state_->check_usable(name);
    check_tensor(name, t);
    return start(name, t, {t}, {t}, [&](nccl::Comm c, nccl::Stream s) {
      return lib().recv(address(t), size_t(t.numel()), nccl::data_type(t.dtype()), src, c, s);
    }, src, tag);
  }

 private:
  // Creates the communicator: `exchange` gives every rank rank 0's id (rank 0 made it), then all ranks join,
  // polled against the timeout.
  NcclProcessGroup(const ProcessGroupOptions& options, int rank, int size,
                   const std::function<void(nccl::UniqueId&)>& exchange)
      : state_(std::make_shared<detail::NcclCommState>()), check_shapes_(detail::check_shapes_requested(options)) {
    const char* name = "init_process_group";
    check<std::invalid_argument>(options.timeout.count() > 0, "NcclProcessGroup: timeout must be positive, got ",
                                 options.timeout.count(), " ms");
    check<std::invalid_argument>(size >= 1 && rank >= 0 && rank < size, "NcclProcessGroup: rank ", rank,
                                 " is not in a group of ", size);
    state_->rank = rank;
    state_->size = size;
    state_->timeout = options.timeout;
    const int devices = cuda::device_count();
    if (devices == 0)
      throw cuda::CudaUnavailableError(kiln::detail::cat(name, ": the nccl backend needs a CUDA device; this machine has none (",
                                                         "use the mpi backend for CPU tensors)"));
    const int device = options.device >= 0 ? options.device
                                           : detail::env_int("LOCAL_RANK").value_or(
                                                 detail::env_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0)) % devices;
    check<std::invalid_argument>(device < devices, "NcclProcessGroup: device ", device, " does not exist (", devices,
                                 " CUDA devices)");
    nccl::Library& nccl = nccl::Library::get();
    state_->context = &cuda::DeviceContext::get(device);
    state_->context->make_current();
    state_->stream = state_->context->create_stream();
    barrier_word_ = kiln::empty({1}, ScalarType::Float, this->device());

    nccl::UniqueId id{};
    if (rank == 0) require(name, nccl.get_unique_id(&id), "ncclGetUniqueId");
    exchange(id);
    nccl::Config config;
    config.blocking = 0;
    state_->context->make_current();
    require(name, nccl.comm_init_rank_config(&state_->comm, size, id, rank, &config), "ncclCommInitRankConfig");
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    nccl::Result r;
    while ((r = state_->async_error()) == nccl::kInProgress) {
      if (std::chrono::steady_clock::now() > deadline)
        state_->fail(name, kiln::detail::cat("rank ", rank, " of ", size, " waited ", options.timeout.count(),
                                             " ms for the other ranks to join the NCCL communicator"));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (r != nccl::kSuccess) state_->fail(name, "ncclCommInitRankConfig failed: " + state_->describe(r));
  }

  static nccl::Library& lib() { return nccl::Library::get(); }
  // A CUDA tensor's device address (data_ptr() refuses device memory: it is for CPU code).
  static void* address(const AnyTensor& t) { return t.impl_ptr()->device_bytes(); }

  void require(const char* name, nccl::Result r, const char* call) {
    if (r != nccl::kSuccess && r != nccl::kInProgress)
      state_->fail(name, kiln::detail::cat(call, " failed: ", nccl::Library::get().error(r, state_->comm)));
  }

  void check_tensor(const char* name, const AnyTensor& t) const {
    check<std::invalid_argument>(t.defined(), name, ": the tensor is undefined");
    check<std::invalid_argument>(t.device() == device(), name, ": the nccl backend takes tensors on ", device().str(),
                       " (this rank's device); got one on ", t.device().str(),
                       t.device().is_cpu() ? " (use the mpi backend for CPU tensors)" : "");
    check<std::invalid_argument>(t.is_contiguous(), name, ": the nccl backend takes contiguous tensors; got shape ",
                                 t.shape(), " with strides ", t.strides(), " (call .contiguous())");
  }

  // Checks the arguments every collective shares (and, with check_shapes, that all ranks agree); returns NCCL's op.
  nccl::RedOp prepare(const char* name, std::initializer_list<AnyTensor> tensors, std::optional<ReduceOp> op = {},
                      int root = 0) {
    state_->check_usable(name);
    detail::check_collective_arguments(name, tensors, root, size());
    for (const AnyTensor& t : tensors) check_tensor(name, t);
    const nccl::RedOp rop = op ? nccl::red_op(*op, tensors.begin()->dtype(), name) : nccl::kSum;
    if (check_shapes_) agree(name, detail::agreement_key(tensors, op, root));
    return rop;
  }

  // Waits (against the timeout) until NCCL has enqueued the previous operation: a non-blocking communicator takes
  // its next call only then.
  void settle_previous(const char* name) {
    if (!pending_) return;
    const auto deadline = std::chrono::steady_clock::now() + state_->timeout;
    std::string error;
    while (!pending_->enqueued(&error)) {
      if (!error.empty()) state_->fail(name, error);
      if (std::chrono::steady_clock::now() > deadline)
        state_->fail(name, kiln::detail::cat("timed out after ", state_->timeout.count(), " ms on rank ", rank(),
                                             " of ", size(), " waiting for the previous operation (#", state_->sequence,
                                             ") to start: another rank exited, hangs or called a different collective"));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Issues `issue(comm, stream)` on the group's stream after the current stream's work, and wraps it.
  // `buffers` stay alive until it completes; `written` get a new version then.
  template <class Issue>
  std::shared_ptr<Work> start(const char* name, const AnyTensor& described, std::vector<AnyTensor> buffers,
                              std::vector<AnyTensor> written, Issue&& issue, int peer = -1, int tag = 0) {
    settle_previous(name);
    ++state_->sequence;
    detail::OpDescription what;
    if (described.defined()) what = {described.numel(), described.dtype(), peer, tag, std::strcmp(name, "recv") == 0};
    auto finish = [written] {
      for (const AnyTensor& t : written)
        if (t.numel() > 0) t.impl_ptr()->storage->bump_version();
    };
    bool empty = described.defined();
    for (const AnyTensor& b : buffers) empty = empty && b.numel() == 0;
    if (empty)  // every rank has nothing to move (sizes agree across ranks): nothing to issue
      return std::make_shared<detail::PolledWork>(state_, name, what, [](std::string*) { return true; },
                                                  std::vector<AnyTensor>{}, nullptr);
    cuda::DeviceContext& context = *state_->context;
    context.stream_wait(state_->stream, cuda::current_stream_of(context.index()));
    context.make_current();
    require(name, issue(state_->comm, reinterpret_cast<nccl::Stream>(state_->stream)), name);
    auto pending = std::make_shared<detail::NcclPending>();
    pending->state = state_;
    pending_ = pending;
    return std::make_shared<detail::PolledWork>(
        state_, name, what, [pending](std::string* error) { return pending->complete(error); }, std::move(buffers),
        std::move(finish));
  }

  // check_shapes: all ranks exchange `mine` (an all_gather on the device) and throw DistError when they differ.
  void agree(const char* name, detail::AgreementKey mine) {
    Tensor<int64_t> key = empty<int64_t>({4});
    std::memcpy(key.data_ptr(), mine.data(), sizeof mine);
    const Tensor<int64_t> here = key.to(device());
    Tensor<int64_t> all = empty<int64_t>({4 * int64_t(size())}, device());
    start(name, AnyTensor(), {here, all}, {}, [&](nccl::Comm c, nccl::Stream s) {
      return lib().all_gather(address(here), address(all), 4, nccl::kInt64, c, s);
    })->wait();
    detail::check_agreement(name, rank(), mine, all.cpu().to_vector());
  }

  std::shared_ptr<detail::NcclCommState> state_;
  bool check_shapes_;
  AnyTensor barrier_word_;
  std::shared_ptr<detail::NcclPending> pending_;  // the last operation issued
};

namespace detail {
// init_process_group("nccl"): a file store when RANK, WORLD_SIZE and KILN_STORE_PATH are set, else the id over
// MPI when the "mpi" backend is registered (<kiln/dist/mpi.hpp> included; under mpirun), else a single process.
inline std::shared_ptr<ProcessGroup> make_nccl_group(const ProcessGroupOptions& options) {
  const std::optional<int> rank = env_int("RANK"), size = env_int("WORLD_SIZE");
  const char* store = std::getenv("KILN_STORE_PATH");
  if (rank && size && store && *store) return std::make_shared<NcclProcessGroup>(options, *rank, *size, store);
  if (backend_registered("mpi")) {
    const std::shared_ptr<ProcessGroup> mpi = new_group("mpi", options);
    return std::make_shared<NcclProcessGroup>(options, *mpi);
  }
  check<std::invalid_argument>(!size || *size == 1, "init_process_group(\"nccl\"): WORLD_SIZE=", size.value_or(1),
                               " needs KILN_STORE_PATH (a file every rank sees) or <kiln/dist/mpi.hpp> and mpirun");
  return std::make_shared<NcclProcessGroup>(options);
}
inline const bool nccl_backend_registered = register_backend("nccl", make_nccl_group);
}  // namespace detail

}  // namespace kiln::dist

// The emulated device's NCCL (libkiln_emulated_nccl.so, named by KILN_NCCL_LIBRARY in the tests that use it): the
// ranks are processes, each with its emulated device (driver.cpp: device memory is host memory), and they exchange
// their buffers through files in a directory named after the unique id (under KILN_EMULATED_NCCL_DIR, else
// TMPDIR, else /tmp). Each operation writes its rank's data to a file (atomically: a temporary file renamed) and
// completes once the files it needs are there; a collective numbered s reads every rank's file s, a send is
// received from a file per sender, receiver and message number. As in NCCL's non-blocking mode (the one kiln uses),
// joining the communicator (init) and leaving it (finalize) return ncclInProgress until every rank did, which
// ncclCommGetAsyncError reports; the other calls are enqueued at once on their stream, and the emulated driver
// (driver.cpp, through kiln_emulated_set_stream_work) reports an event recorded after one, or the stream, as not
// ready until it completed. So a rank that never posts leaves its peers' operations pending, as a lost peer leaves a
// real communicator's, and kiln's deadline must turn that into an error. Sends complete when written. Reductions
// compute in the dtype (integers) or in float and double (floating types) and round once. Only what kiln's
// dist/nccl.hpp calls is here.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/dtype.hpp"

namespace {

namespace fs = std::filesystem;

constexpr int kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5, kInProgress = 7;
enum DataType { kInt8, kUint8, kInt32, kUint32, kInt64, kUint64, kFloat16, kFloat32, kFloat64, kBfloat16 };
enum RedOp { kSum, kProd, kMax, kMin, kAvg };

size_t element_size(int dt) {
  switch (dt) {
    case kInt8: case kUint8: return 1;
    case kFloat16: case kBfloat16: return 2;
    case kInt32: case kUint32: case kFloat32: return 4;
    default: return 8;
  }
}

struct UniqueId {
  char internal[128];
};

enum class Kind { join, all_reduce, broadcast, reduce, all_gather, reduce_scatter, finalize, send, recv };

struct Op {
  Kind kind;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements: of each rank's part for all_gather and reduce_scatter
  int dt = kFloat32, op = kSum, root = 0, peer = -1;
  uint64_t number = 0;  // the collective's sequence number, or the message's between this pair of ranks
  void* stream = nullptr;
  unsigned long long ticket = 0;  // its place among every operation of this process
};

struct Comm {
  fs::path dir;
  int nranks = 1, rank = 0;
  uint64_t collectives = 0;                 // posted so far (the join is number 0)
  std::vector<uint64_t> sent, received;     // messages per peer
  std::vector<Op> pending;                  // posted, not complete
  std::vector<Op> grouped;                  // between ncclGroupStart and ncclGroupEnd
  std::vector<uint64_t> unreleased;         // collectives whose data file of this rank may still be read
  std::string last_error;
};

thread_local int group_depth = 0;
thread_local Comm* group_comm = nullptr;

// Every live communicator and the last ticket issued on each stream, for the emulated driver's events.
struct Registry {
  std::recursive_mutex mutex;
  std::set<Comm*> comms;
  std::map<void*, unsigned long long> last_ticket;
  unsigned long long next_ticket = 0;
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

fs::path collective_file(const Comm& c, uint64_t number, int rank) {
  return c.dir / ("c" + std::to_string(number) + ".r" + std::to_string(rank));
}
// Written by a rank once it completed collective `number`: when every rank did, each removes its data file.
fs::path done_file(const Comm& c, uint64_t number, int rank) {
  return c.dir / ("c" + std::to_string(number) + ".r" + std::to_string(rank) + ".done");
}
fs::path message_file(const Comm& c, int from, int to, uint64_t number) {
  return c.dir / ("p" + std::to_string(from) + "-" + std::to_string(to) + "." + std::to_string(number));
}

void write_file(const fs::path& path, const void* data, size_t bytes) {
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(data), std::streamsize(bytes));
  }
  fs::rename(tmp, path);
}
std::vector<char> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

template <class T, class Acc>
void reduce_typed(std::vector<char>& out, const std::vector<const char*>& parts, size_t offset, size_t count, int op,
                  int nranks) {
  T* dst = reinterpret_cast<T*>(out.data());
  for (size_t i = 0; i < count; ++i) {
    auto at = [&](int q) {
      T v;
      std::memcpy(&v, parts[size_t(q)] + (offset + i) * sizeof(T), sizeof(T));
      return Acc(v);
    };
    Acc r = at(0);
    for (int q = 1; q < nranks; ++q) {
      const Acc x = at(q);
      r = op == kProd ? Acc(r * x) : op == kMax ? std::max(r, x) : op == kMin ? std::min(r, x) : Acc(r + x);
    }
    if (op == kAvg) r = Acc(r / Acc(nranks));
    dst[i] = T(r);
  }
}

// The reduction over the ranks' parts of `count` elements from `offset` (elements) in each.
std::vector<char> reduce_parts(const std::vector<const char*>& parts, size_t offset, size_t count, int dt, int op,
                               int nranks) {
  std::vector<char> out(count * element_size(dt));
  switch (dt) {
    case kInt8: reduce_typed<int8_t, int8_t>(out, parts, offset, count, op, nranks); break;
    case kUint8: reduce_typed<uint8_t, uint8_t>(out, parts, offset, count, op, nranks); break;
    case kInt32: reduce_typed<int32_t, int32_t>(out, parts, offset, count, op, nranks); break;
    case kUint32: reduce_typed<uint32_t, uint32_t>(out, parts, offset, count, op, nranks); break;
    case kInt64: reduce_typed<int64_t, int64_t>(out, parts, offset, count, op, nranks); break;
    case kUint64: reduce_typed<uint64_t, uint64_t>(out, parts, offset, count, op, nranks); break;
    case kFloat16: reduce_typed<kiln::float16, float>(out, parts, offset, count, op, nranks); break;
    case kBfloat16: reduce_typed<kiln::bfloat16, float>(out, parts, offset, count, op, nranks); break;
    case kFloat32: reduce_typed<float, double>(out, parts, offset, count, op, nranks); break;
    case kFloat64: reduce_typed<double, double>(out, parts, offset, count, op, nranks); break;
  }
  return out;
}

size_t sent_bytes(const Op& o, int nranks) {
  const size_t e = element_size(o.dt);
  switch (o.kind) {
    case Kind::join: case Kind::finalize: case Kind::recv: return 0;
    case Kind::reduce_scatter: return o.count * size_t(nranks) * e;
    default: return o.count * e;
  }
}

// Writes what the operation sends.
void post(Comm& c, Op& o) {
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    o.ticket = ++r.next_ticket;
    r.last_ticket[o.stream] = o.ticket;
  }
  if (o.kind == Kind::send) {
    o.number = c.sent[size_t(o.peer)]++;
    write_file(message_file(c, c.rank, o.peer, o.number), o.send, o.count * element_size(o.dt));
    return;
  }
  if (o.kind == Kind::recv) {
    o.number = c.received[size_t(o.peer)]++;
    c.pending.push_back(o);
    return;
  }
  o.number = c.collectives++;
  write_file(collective_file(c, o.number, c.rank), o.send, sent_bytes(o, c.nranks));
  c.pending.push_back(o);
}

// Completes `o` when what it needs has arrived.
bool try_complete(Comm& c, const Op& o) {
  const size_t e = element_size(o.dt);
  if (o.kind == Kind::recv) {
    const fs::path file = message_file(c, o.peer, c.rank, o.number);
    if (!fs::exists(file)) return false;
    const std::vector<char> data = read_file(file);
    std::memcpy(o.recv, data.data(), std::min(data.size(), o.count * e));
    fs::remove(file);
    return true;
  }
  for (int q = 0; q < c.nranks; ++q)
    if (!fs::exists(collective_file(c, o.number, q))) return false;
  std::vector<std::vector<char>> files;
  std::vector<const char*> parts;
  for (int q = 0; q < c.nranks; ++q) files.push_back(read_file(collective_file(c, o.number, q)));
  for (const auto& f : files) parts.push_back(f.data());
  std::vector<char> result;
  switch (o.kind) {
    case Kind::all_reduce: result = reduce_parts(parts, 0, o.count, o.dt, o.op, c.nranks); break;
    case Kind::reduce:
      if (c.rank == o.root) result = reduce_parts(parts, 0, o.count, o.dt, o.op, c.nranks);
      break;
    case Kind::broadcast: result = files[size_t(o.root)]; break;
    case Kind::all_gather:
      for (const auto& f : files) result.insert(result.end(), f.begin(), f.end());
      break;
    case Kind::reduce_scatter:
      result = reduce_parts(parts, size_t(c.rank) * o.count, o.count, o.dt, o.op, c.nranks);
      break;
    default: break;
  }
  if (!result.empty()) std::memcpy(o.recv, result.data(), result.size());
  write_file(done_file(c, o.number, c.rank), "", 0);
  c.unreleased.push_back(o.number);
  return true;
}

// Removes this rank's data files of the collectives every rank has completed.
void release(Comm& c) {
  std::erase_if(c.unreleased, [&](uint64_t number) {
    for (int q = 0; q < c.nranks; ++q)
      if (!fs::exists(done_file(c, number, q))) return false;
    fs::remove(collective_file(c, number, c.rank));
    return true;
  });
}

// Completes what can be, in order; kInProgress while joining or leaving the communicator is pending.
int progress(Comm& c) {
  while (!c.pending.empty() && try_complete(c, c.pending.front())) c.pending.erase(c.pending.begin());
  release(c);
  for (const Op& o : c.pending)
    if (o.kind == Kind::join || o.kind == Kind::finalize) return kInProgress;
  return kSuccess;
}

unsigned long long stream_ticket(void* stream) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.last_ticket.find(stream);
  return it == r.last_ticket.end() ? 0 : it->second;
}
// Whether every operation on `stream` (any stream: the driver's ~0) up to `ticket` completed.
bool stream_done(void* stream, unsigned long long ticket) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (Comm* c : r.comms) {
    progress(*c);
    for (const Op& o : c->pending)
      if ((stream == reinterpret_cast<void*>(~uintptr_t(0)) || o.stream == stream) && o.ticket <= ticket) return false;
  }
  return true;
}

// Hands the emulated driver (already loaded by kiln, named by KILN_CUDA_DRIVER_LIBRARY) the two functions above.
void register_with_driver() {
  static const bool done = [] {
    const char* path = std::getenv("KILN_CUDA_DRIVER_LIBRARY");
    void* driver = path ? ::dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
    using Set = void (*)(unsigned long long (*)(void*), bool (*)(void*, unsigned long long));
    if (auto set = driver ? reinterpret_cast<Set>(::dlsym(driver, "kiln_emulated_set_stream_work")) : nullptr)
      set(stream_ticket, stream_done);
    return true;
  }();
  (void)done;
}

int submit(Comm* c, Op o) {
  if (!c) return kInvalidArgument;
  std::lock_guard lock(registry().mutex);
  if (group_depth > 0) {
    if (group_comm && group_comm != c) return kInvalidUsage;  // (kiln groups calls of one communicator)
    group_comm = c;
    c->grouped.push_back(o);
    return kSuccess;
  }
  post(*c, o);
  return progress(*c);
}

}  // namespace

extern "C" {

int ncclGetVersion(int* version) {
  *version = 21800;
  return kSuccess;
}
const char* ncclGetErrorString(int r) {
  return r == kInProgress ? "operation in progress (emulated NCCL)" : r == kSuccess ? "no error" : "error (emulated NCCL)";
}
const char* ncclGetLastError(void* comm) { return comm ? static_cast<Comm*>(comm)->last_error.c_str() : ""; }

int ncclGetUniqueId(UniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::random_device rd;
  const std::string token = "kiln-emulated-nccl-" + std::to_string(::getpid()) + "-" + std::to_string(rd()) +
                            std::to_string(rd());
  std::memcpy(id->internal, token.data(), std::min(token.size(), sizeof id->internal - 1));
  return kSuccess;
}

int ncclCommInitRankConfig(void** comm, int nranks, UniqueId id, int rank, void*) {
  if (nranks < 1 || rank < 0 || rank >= nranks) return kInvalidArgument;
  const char* base = std::getenv("KILN_EMULATED_NCCL_DIR");
  if (!base || !*base) base = std::getenv("TMPDIR");
  auto* c = new Comm;
  c->dir = fs::path(base && *base ? base : "/tmp") / std::string(id.internal, strnlen(id.internal, sizeof id.internal));
  c->nranks = nranks;
  c->rank = rank;
  c->sent.assign(size_t(nranks), 0);
  c->received.assign(size_t(nranks), 0);
  std::error_code ec;
  fs::create_directories(c->dir, ec);
  register_with_driver();
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.comms.insert(c);
  }
  *comm = c;
  return submit(c, Op{Kind::join});
}

int ncclCommGetAsyncError(void* comm, int* result) {
  if (!comm) return kInvalidArgument;
  std::lock_guard lock(registry().mutex);
  *result = progress(*static_cast<Comm*>(comm));
  return kSuccess;
}
int ncclCommFinalize(void* comm) { return submit(static_cast<Comm*>(comm), Op{Kind::finalize}); }
int ncclCommDestroy(void* comm) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.comms.erase(static_cast<Comm*>(comm));
  delete static_cast<Comm*>(comm);
  return kSuccess;
}
int ncclCommAbort(void* comm) { return ncclCommDestroy(comm); }

int ncclAllReduce(const void* send, void* recv, size_t count, int dt, int op, void* comm, void* stream) {
  return submit(static_cast<Comm*>(comm), Op{Kind::all_reduce, send, recv, count, dt, op, 0, -1, 0, stream});
}
int ncclBroadcast(const void* send, void* recv, size_t count, int dt, int root, void* comm, void* stream) {
  return submit(static_cast<Comm*>(comm), Op{Kind::broadcast, send, recv, count, dt, kSum, root, -1, 0, stream});
}
int ncclReduce(const void* send, void* recv, size_t count, int dt, int op, int root, void* comm, void* stream) {
  return submit(static_cast<Comm*>(comm), Op{Kind::reduce, send, recv, count, dt, op, root, -1, 0, stream});
}
int ncclAllGather(const void* send, void* recv, size_t count, int dt, void* comm, void* stream) {
  return submit(static_cast<Comm*>(comm), Op{Kind::all_gather, send, recv, count, dt, kSum, 0, -1, 0, stream});
}
int ncclReduceScatter(const void* send, void* recv, size_t count, int dt, int op, void* comm, void* stream) {
  return submit(static_cast<Comm*>(comm), Op{Kind::reduce_scatter, send, recv, count, dt, op, 0, -1, 0, stream});
}
int ncclSend(const void* send, size_t count, int dt, int peer, void* comm, void* stream) {
  auto* c = static_cast<Comm*>(comm);
  if (!c || peer < 0 || peer >= c->nranks) return kInvalidArgument;
  return submit(c, Op{Kind::send, send, nullptr, count, dt, kSum, 0, peer, 0, stream});
}
int ncclRecv(void* recv, size_t count, int dt, int peer, void* comm, void* stream) {
  auto* c = static_cast<Comm*>(comm);
  if (!c || peer < 0 || peer >= c->nranks) return kInvalidArgument;
  return submit(c, Op{Kind::recv, nullptr, recv, count, dt, kSum, 0, peer, 0, stream});
}
int ncclGroupStart() {
  ++group_depth;
  return kSuccess;
}
// Posts the group's operations (sends first, so that ranks exchanging within a group do not wait on each other).
int ncclGroupEnd() {
  if (group_depth == 0) return kInvalidUsage;
  if (--group_depth > 0 || !group_comm) return kSuccess;
  std::lock_guard lock(registry().mutex);
  Comm& c = *group_comm;
  group_comm = nullptr;
  std::stable_partition(c.grouped.begin(), c.grouped.end(), [](const Op& o) { return o.kind == Kind::send; });
  for (Op& o : c.grouped) post(c, o);
  c.grouped.clear();
  return progress(c);
}

}  // extern "C"

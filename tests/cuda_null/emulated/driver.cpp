// The emulated device's CUDA driver (libkiln_emulated_cuda.so, named by KILN_CUDA_DRIVER_LIBRARY in the tests that
// use it): one device of compute capability 9.0 whose memory is host memory (a budget of
// KILN_EMULATED_DEVICE_BYTES, 256 MiB by default, past which cuMemAlloc reports CUDA_ERROR_OUT_OF_MEMORY), whose
// modules are the host libraries that the emulated NVRTC (nvrtc.cpp) builds, and whose launches run at once on
// the calling thread (streams and events are therefore complete but for the emulated NCCL's work, below; it
// counts the launches on each stream, kiln_emulated_launches_on, for the tests). It checks what a GPU would refuse
// and a host would not notice: more than 1024 threads, and dynamic shared memory past 48 KiB without
// cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) or past 227 KiB. Only what kiln's cuda/driver.hpp and
// cuda/runtime.hpp call is here. KILN_EMULATED_SKIP_KERNELS=1 checks and counts launches without running them
// (skip_kernels.hpp). The emulated NCCL (nccl.cpp) registers its work per stream
// (kiln_emulated_set_stream_work): an event recorded after a collective is complete, and a stream or the context
// synchronized, only once that collective is.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

#include "image.hpp"
#include "skip_kernels.hpp"

namespace {

constexpr int kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kInvalidImage = 200, kNotFound = 500,
              kNotReady = 600, kLaunchOutOfResources = 701, kInvalidHandle = 400;
constexpr size_t kDefaultShared = 48 * 1024, kMaxShared = 227 * 1024;

using Launch = void (*)(void**, unsigned, unsigned);

struct Function {
  Launch launch;
  size_t max_shared = kDefaultShared;
};

struct Device {
  std::mutex mutex;
  std::map<void*, size_t> allocations;
  size_t used = 0;
  std::map<void*, long long> launches_on;  // per stream (created ones and the default, null): kernels launched
  size_t budget() const {
    const char* env = std::getenv("KILN_EMULATED_DEVICE_BYTES");
    return env && *env ? size_t(std::strtoull(env, nullptr, 10)) : size_t(256) << 20;
  }
};

Device& device() {
  static Device* d = new Device;  // (never destroyed: kiln's contexts free their cached memory at exit)
  return *d;
}

// The emulated NCCL's operations on a stream: ticket(stream) numbers the last one issued on it, done(stream, ticket)
// moves them along and says whether every one up to the ticket completed (stream kAnyStream: on every stream).
struct StreamWork {
  unsigned long long (*ticket)(void* stream) = nullptr;
  bool (*done)(void* stream, unsigned long long ticket) = nullptr;
};
StreamWork& stream_work() {
  static StreamWork w;
  return w;
}
void* const kAnyStream = reinterpret_cast<void*>(~uintptr_t(0));
bool stream_work_done(void* stream, unsigned long long ticket) {
  return !stream_work().done || stream_work().done(stream, ticket);
}
void wait_for_stream_work(void* stream) {
  while (!stream_work_done(stream, ~0ull)) ::usleep(200);
}

struct Event {
  void* stream = nullptr;
  unsigned long long ticket = 0;
};

// A stream kiln may use: the default one or one created and not destroyed.
bool known_stream(void* stream) {
  std::lock_guard lock(device().mutex);
  return !stream || device().launches_on.count(stream);
}

}  // namespace

extern "C" {

int cuInit(unsigned) { return kSuccess; }
int cuDriverGetVersion(int* v) {
  *v = 13000;
  return kSuccess;
}
int cuDeviceGetCount(int* n) {
  *n = 1;
  return kSuccess;
}
int cuDeviceGet(int* dev, int ordinal) {
  if (ordinal != 0) return kInvalidValue;
  *dev = 0;
  return kSuccess;
}
int cuDeviceGetAttribute(int* value, int attribute, int) {
  *value = attribute == 75 ? 9 : attribute == 76 ? 0 : 0;  // compute capability 9.0
  return kSuccess;
}
int cuGetErrorString(int status, const char** text) {
  *text = status == kOutOfMemory             ? "out of memory (emulated device)"
          : status == kLaunchOutOfResources ? "too many resources requested for launch (emulated device)"
          : status == kNotFound             ? "named symbol not found (emulated device)"
                                            : "error (emulated device)";
  return kSuccess;
}
int cuDevicePrimaryCtxRetain(void** context, int) {
  *context = reinterpret_cast<void*>(uintptr_t(1));
  return kSuccess;
}
int cuCtxSetCurrent(void*) { return kSuccess; }
int cuCtxSynchronize() {
  wait_for_stream_work(kAnyStream);
  return kSuccess;
}

int cuMemAlloc_v2(uint64_t* p, size_t bytes) {
  Device& d = device();
  std::lock_guard lock(d.mutex);
  if (bytes == 0) return kInvalidValue;
  if (d.used + bytes > d.budget()) return kOutOfMemory;
  void* q = std::malloc(bytes);
  if (!q) return kOutOfMemory;
  d.allocations[q] = bytes;
  d.used += bytes;
  *p = uint64_t(reinterpret_cast<uintptr_t>(q));
  return kSuccess;
}
int cuMemFree_v2(uint64_t p) {
  Device& d = device();
  std::lock_guard lock(d.mutex);
  void* q = reinterpret_cast<void*>(uintptr_t(p));
  const auto it = d.allocations.find(q);
  if (it == d.allocations.end()) return kInvalidValue;
  d.used -= it->second;
  d.allocations.erase(it);
  std::free(q);
  return kSuccess;
}
int cuMemcpyHtoD_v2(uint64_t dst, const void* src, size_t n) {
  std::memcpy(reinterpret_cast<void*>(uintptr_t(dst)), src, n);
  return kSuccess;
}
int cuMemcpyDtoH_v2(void* dst, uint64_t src, size_t n) {
  std::memcpy(dst, reinterpret_cast<const void*>(uintptr_t(src)), n);
  return kSuccess;
}
int cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t n) {
  std::memmove(reinterpret_cast<void*>(uintptr_t(dst)), reinterpret_cast<const void*>(uintptr_t(src)), n);
  return kSuccess;
}
int cuMemsetD8_v2(uint64_t dst, unsigned char v, size_t n) {
  std::memset(reinterpret_cast<void*>(uintptr_t(dst)), v, n);
  return kSuccess;
}

int cuModuleLoadData(void** module, const void* image) {
  const std::string library = kiln::emulated::unwrap_image(image);
  if (library.empty()) return kInvalidImage;
  static std::mutex mutex;
  static int count = 0;
  std::lock_guard lock(mutex);
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("kiln-emulated-module-" + std::to_string(::getpid()) + "-" + std::to_string(count++) + ".so");
  std::ofstream(file, std::ios::binary) << library;
  *module = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);  // (kept loaded: modules live as long as the context)
  std::error_code ec;
  std::filesystem::remove(file, ec);
  return *module ? kSuccess : kInvalidImage;
}
int cuModuleGetFunction(void** function, void* module, const char* name) {
  void* launch = ::dlsym(module, (std::string(name) + "_launch").c_str());
  if (!launch) return kNotFound;
  *function = new Function{reinterpret_cast<Launch>(launch)};
  return kSuccess;
}
int cuFuncSetAttribute(void* function, int attribute, int value) {
  if (attribute == 8) {  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if (value < 0 || size_t(value) > kMaxShared) return kInvalidValue;
    static_cast<Function*>(function)->max_shared = size_t(value);
  }
  return kSuccess;
}
int cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void* stream, void** params, void**) {
  const Function& f = *static_cast<Function*>(function);
  if (gy != 1 || gz != 1 || by != 1 || bz != 1) return kInvalidValue;  // (kiln's kernels use x only)
  if (bx == 0 || bx > 1024 || gx == 0 || shared > f.max_shared) return kLaunchOutOfResources;
  if (!known_stream(stream)) return kInvalidHandle;
  if (!kiln_emulated::skip_kernels()) f.launch(params, gx, bx);
  std::lock_guard lock(device().mutex);
  ++device().launches_on[stream];
  return kSuccess;
}

// Streams: handles of their own, checked wherever one is passed; the work on them is done at once.
int cuStreamCreate(void** stream, unsigned) {
  *stream = new int(0);
  std::lock_guard lock(device().mutex);
  device().launches_on[*stream] = 0;
  return kSuccess;
}
int cuStreamSynchronize(void* stream) {
  if (!known_stream(stream)) return kInvalidHandle;
  wait_for_stream_work(stream);
  return kSuccess;
}
int cuStreamQuery(void* stream) {
  if (!known_stream(stream)) return kInvalidHandle;
  return stream_work_done(stream, ~0ull) ? kSuccess : kNotReady;
}
int cuStreamWaitEvent(void* stream, void* event, unsigned) {
  return known_stream(stream) && event ? kSuccess : kInvalidHandle;
}
// For the tests: how many kernels have been launched on `stream` (null: the default stream).
long long kiln_emulated_launches_on(void* stream) {
  std::lock_guard lock(device().mutex);
  return device().launches_on[stream];
}

int cuEventCreate(void** event, unsigned) {
  *event = new Event;
  return kSuccess;
}
int cuEventRecord(void* event, void* stream) {
  if (!known_stream(stream)) return kInvalidHandle;
  auto* e = static_cast<Event*>(event);
  e->stream = stream;
  e->ticket = stream_work().ticket ? stream_work().ticket(stream) : 0;
  return kSuccess;
}
int cuEventQuery(void* event) {
  const auto* e = static_cast<const Event*>(event);
  return stream_work_done(e->stream, e->ticket) ? kSuccess : kNotReady;
}
int cuEventDestroy_v2(void* event) {
  delete static_cast<Event*>(event);
  return kSuccess;
}
// Called by the emulated NCCL when it first runs.
void kiln_emulated_set_stream_work(unsigned long long (*ticket)(void*), bool (*done)(void*, unsigned long long)) {
  stream_work() = {ticket, done};
}

}  // extern "C"

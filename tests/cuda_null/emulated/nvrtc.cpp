// The emulated device's NVRTC (libkiln_emulated_nvrtc.so, named by KILN_NVRTC_LIBRARY in the tests that use it):
// "compiles" a program by building its source for the host with the shim of ../shim_source.hpp into a shared
// library, whose bytes, behind a small header, are the "cubin" that the emulated driver (driver.cpp) loads. Each
// kernel `extern "C" __global__ void NAME(...)` gets the entry NAME_launch(void** params, grid, block) that
// cuLaunchKernel calls: a kernel that calls __syncthreads runs each block as host threads at barriers.
// Only what kiln's cuda/nvrtc.hpp calls is here.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../shim_source.hpp"
#include "image.hpp"

namespace {

struct Program {
  std::string source, name, log, image;
};

constexpr int kSuccess = 0, kInvalidInput = 3, kCompilationError = 6;

// The host entry points of every kernel in the source.
std::string entries(const std::string& source) {
  const std::string marker = "extern \"C\" __global__ void ";
  std::string out;
  for (size_t at = source.find(marker); at != std::string::npos;) {
    const size_t name_begin = at + marker.size(), name_end = source.find('(', name_begin);
    const std::string name = source.substr(name_begin, name_end - name_begin);
    const size_t next = source.find(marker, name_end);
    const std::string body = source.substr(name_end, next == std::string::npos ? std::string::npos : next - name_end);
    const bool by_pointer = body.rfind("(const " + name + "_desc* ", 0) == 0;
    out += kiln::test::host_entry(name, by_pointer, body.find("__syncthreads") != std::string::npos);
    out += "extern \"C\" void " + name + "_launch(void** params, unsigned grid, unsigned block) {\n  " + name + "_host(" +
           (by_pointer ? "*static_cast<const void* const*>(params[0])" : "params[0]") + ", grid, block);\n}\n";
    at = next;
  }
  return out;
}

int compile(Program& p) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln-emulated-nvrtc-" + std::to_string(::getpid()) + "-" +
                                                std::to_string(reinterpret_cast<uintptr_t>(&p)));
  std::filesystem::create_directories(dir);
  const auto src = dir / "program.cpp", lib = dir / "program.so", log = dir / "log.txt";
  const bool compiled = kiln::test::compile_with_shim(p.source + "\n" + entries(p.source), src, lib, log);
  std::stringstream text;
  text << std::ifstream(log).rdbuf();
  p.log = text.str();
  if (compiled) {
    std::stringstream bytes;
    bytes << std::ifstream(lib, std::ios::binary).rdbuf();
    p.image = kiln::emulated::wrap_image(bytes.str());
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return compiled ? kSuccess : kCompilationError;
}

int copy_out(const std::string& s, char* out) {
  s.copy(out, s.size());
  out[s.size()] = '\0';
  return kSuccess;
}

}  // namespace

extern "C" {

int nvrtcVersion(int* major, int* minor) {
  *major = 13;
  *minor = 0;
  return kSuccess;
}
int nvrtcGetNumSupportedArchs(int* n) {
  *n = 2;
  return kSuccess;
}
int nvrtcGetSupportedArchs(int* archs) {
  archs[0] = 80;
  archs[1] = 90;
  return kSuccess;
}
const char* nvrtcGetErrorString(int status) {
  return status == kCompilationError ? "NVRTC_ERROR_COMPILATION (emulated)" : "NVRTC error (emulated)";
}
int nvrtcCreateProgram(void** handle, const char* source, const char* name, int, const char* const*, const char* const*) {
  if (!source) return kInvalidInput;
  *handle = new Program{source, name ? name : "program", "", ""};
  return kSuccess;
}
int nvrtcDestroyProgram(void** handle) {
  delete static_cast<Program*>(*handle);
  *handle = nullptr;
  return kSuccess;
}
int nvrtcCompileProgram(void* handle, int, const char* const*) { return compile(*static_cast<Program*>(handle)); }
int nvrtcGetProgramLogSize(void* handle, size_t* size) {
  *size = static_cast<Program*>(handle)->log.size() + 1;
  return kSuccess;
}
int nvrtcGetProgramLog(void* handle, char* out) { return copy_out(static_cast<Program*>(handle)->log, out); }
int nvrtcGetCUBINSize(void* handle, size_t* size) {
  *size = static_cast<Program*>(handle)->image.size();
  return kSuccess;
}
int nvrtcGetCUBIN(void* handle, char* out) {
  const std::string& image = static_cast<Program*>(handle)->image;
  image.copy(out, image.size());
  return kSuccess;
}
int nvrtcGetPTXSize(void* handle, size_t* size) { return nvrtcGetCUBINSize(handle, size); }
int nvrtcGetPTX(void* handle, char* out) { return nvrtcGetCUBIN(handle, out); }

}  // extern "C"

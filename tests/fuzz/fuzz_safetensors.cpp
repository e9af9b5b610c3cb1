// libFuzzer target for the safetensors reader (scripts/fuzz_safetensors.sh builds and runs it).
// Any input must either parse or throw io::FormatError; anything else (another exception, a sanitizer report, a
// crash) is a bug. An input that parses must survive a round trip: written back and read again, it gives the
// same tensors and metadata.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kiln/io/safetensors.hpp"

using namespace kiln;

namespace {

bool same(const AnyTensor& a, const AnyTensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  io::SafetensorsFile file;
  try {
    file = io::parse_safetensors({data, size}, "fuzz input");
  } catch (const io::FormatError&) {
    return 0;
  }
  const io::SafetensorsFile again = io::parse_safetensors(io::serialize_safetensors(file.tensors, file.metadata));
  if (again.metadata != file.metadata || again.tensors.size() != file.tensors.size()) std::abort();
  for (const auto& [name, t] : file.tensors)
    if (!again.tensors.contains(name) || !same(t, again.tensors.at(name))) std::abort();
  return 0;
}

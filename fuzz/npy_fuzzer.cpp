// libFuzzer target: a NumPy .npy file as a pipeline stage reads one
// (docs/pipelines.md): its framing and header parsed and checked against
// its size. A header that passes must describe exactly the bytes that
// follow it, and every refusal must say why.
#include <cstddef>
#include <cstdint>

#include "messages/errc.hpp"
#include "tools/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto info = cohort::tools::npy::parse(data, size, "fuzz.npy");
  if (!info) {
    if (cohort::describe(info.error()).find("fuzz.npy: ") == std::string::npos)
      __builtin_trap();
    return 0;
  }
  auto bytes = info->elements * cohort::kernels::element_size(info->type);
  if (info->data_offset > size || bytes != size - info->data_offset ||
      info->rows * info->row_elements != info->elements)
    __builtin_trap();
  return 0;
}

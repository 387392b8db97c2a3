// The stretches of a VMM arena's block: what an importer accepts of them.
#include "exports/vmm_span.h"

#include <fmt/format.h>

namespace gpumem::shim::ipc {

bool plausible_stretches(std::span<const VmmStretch> stretches, std::uint64_t offset, std::uint64_t size,
                         std::string& what) {
  std::uint64_t total = 0;
  for (const VmmStretch& stretch : stretches) {
    if (stretch.size == 0 || stretch.size > UINT64_MAX - total || stretch.offset > UINT64_MAX - stretch.size) {
      what = "a bad mapping";
      return false;
    }
    total += stretch.size;
  }
  if (stretches.empty() || offset >= total || size > total - offset) {
    what = fmt::format("{} bytes at offset {} of {} bytes of mappings", size, offset, total);
    return false;
  }
  return true;
}

}  // namespace gpumem::shim::ipc

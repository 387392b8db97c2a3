// Device tables the public record names without knowing their entries' meaning well enough to
// simulate them: every entry answers CUDA_ERROR_NOT_SUPPORTED (said once).
#include "export_tables.h"

using namespace cudasim::export_tables;

// Extended device attributes (OptiX reads ray-tracing capabilities through slot 5).
const TableInfo& cudasim::export_tables::device_extended_rt() {
  constexpr Table kTable = Table::DeviceExtendedRt;
  static const TableBuilder<kTable, 26> slots(true);
  static const TableInfo info = slots.info("DEVICE_EXTENDED_RT", uuid("{B10541E1-F7C7-C74A-9F64-F223BE99F1E2}"));
  return info;
}

// The device-side heap (malloc in kernels).
const TableInfo& cudasim::export_tables::heap_access() {
  constexpr Table kTable = Table::HeapAccess;
  static const TableBuilder<kTable, 3> slots(true);
  static const TableInfo info = slots.info("HEAP_ACCESS", uuid("{195BCBF4-D67D-024A-ACC5-1D29CEA631AE}"));
  return info;
}

// Device tables the public record names without knowing their entries' meaning well enough to
// simulate them: every entry answers CUDA_ERROR_NOT_SUPPORTED (said once).
#include "export_tables.h"

using namespace cudasim::export_tables;

// Extended device attributes (OptiX reads ray-tracing capabilities through slot 5).
const TableInfo& cudasim::export_tables::device_extended_rt() {
  return define_table<Table::DeviceExtendedRt, 26>("DEVICE_EXTENDED_RT", uuid("{B10541E1-F7C7-C74A-9F64-F223BE99F1E2}"), true, no_entries);
}

// The device-side heap (malloc in kernels).
const TableInfo& cudasim::export_tables::heap_access() {
  return define_table<Table::HeapAccess, 3>("HEAP_ACCESS", uuid("{195BCBF4-D67D-024A-ACC5-1D29CEA631AE}"), true, no_entries);
}

// Tables the public record names (or not even that) without knowing their entries' meaning well enough to
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

// A table no public record names. cuBLASLt asks for it in cublasGemmEx's half-precision path and
// calls slot 4 without checking that the table was handed out, so refusing the UUID would crash
// it; every slot is unknown (16, the size not published), so the call fails instead.
const TableInfo& cudasim::export_tables::unnamed_1734() {
  return define_table<Table::Unnamed1734, 16>("UNNAMED_1734DC26", uuid("{1734DC26-800D-4745-8726-C0F1E7DD8BCA}"), true, no_entries);
}

// Context tables: checks NVIDIA's runtime makes of a context it is given, and the context creation
// that bypasses the runtime's own bookkeeping.
#include "export_tables.h"

using namespace cudasim::export_tables;

namespace {

// CONTEXT_CHECKS slot 2: reports no special property of the context (0), as the public record saw
// on every driver; the second output is left as is.
CUresult context_properties(CUcontext, unsigned* properties, const void**) {
  if (properties == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *properties = 0;
  return CUDA_SUCCESS;
}

// CONTEXT_CHECKS slot 3: a process-wide check that reads 0 on every driver the record saw.
unsigned process_check() { return 0; }

// CTX_CREATE_BYPASS slot 1: cuCtxCreate_v2 (programs use the two interchangeably).
CUresult create_context(CUcontext* context, unsigned flags, CUdevice device) {
  return cuCtxCreate_v2(context, flags, device);
}

}  // namespace

const TableInfo& cudasim::export_tables::context_checks() {
  return define_table<Table::ContextChecks, 4>("CONTEXT_CHECKS", uuid("{263E8860-7CD2-6143-92F6-BBD5006DFA7E}"), true, [](auto& b) {
    b.template set<2, context_properties>(Knowledge::Inferred, "a context's special properties (0: none)");
    b.template set<3, process_check>(Knowledge::Inferred, "a process-wide check (0)");
  });
}

const TableInfo& cudasim::export_tables::ctx_create_bypass() {
  return define_table<Table::CtxCreateBypass, 2>("CTX_CREATE_BYPASS", uuid("{0CA50B8C-1004-929A-89A7-D0DF10E77286}"), true, [](auto& b) {
    b.template set<1, create_context>(Knowledge::Inferred, "cuCtxCreate_v2");
  });
}

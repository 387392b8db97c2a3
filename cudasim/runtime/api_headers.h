// The toolkit's own declarations, included so that every definition in this runtime is checked
// against NVIDIA's exact signatures (and cudaTypedefs.h for the driver's versioned ones). The public entry points are built with hidden visibility by
// default; declaring them under `visibility push(default)` exports exactly the functions the
// headers name, while every helper of ours stays hidden.
#pragma once

#pragma GCC visibility push(default)
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>
#include <cudaProfilerTypedefs.h>
#include <cuda_profiler_api.h>
#pragma GCC visibility pop

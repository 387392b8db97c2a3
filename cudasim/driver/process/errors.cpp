// cuGetErrorName / cuGetErrorString: usable before cuInit, as documented.
#include "cuda_api.h"

namespace {

struct ErrorText {
  CUresult code;
  const char* name;
  const char* description;
};

constexpr ErrorText kErrors[] = {
#include "error_table.inc"
};

const ErrorText* find_error(CUresult code) {
  for (const ErrorText& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

}  // namespace

CUDASIM_EXPORT CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(error);
  *pStr = e != nullptr ? e->name : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUDASIM_EXPORT CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(error);
  *pStr = e != nullptr ? e->description : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

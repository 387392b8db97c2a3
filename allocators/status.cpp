// Names of the allocation core's statuses.
#include "status.h"

namespace gpumem {

const char* to_string(Status status) noexcept {
  switch (status) {
    case Status::ok: return "ok";
    case Status::zero_size: return "zero_size";
    case Status::out_of_memory: return "out_of_memory";
    case Status::fences_pending: return "fences_pending";
    case Status::not_owned: return "not_owned";
    case Status::double_free: return "double_free";
    case Status::invalid_argument: return "invalid_argument";
  }
  return "unknown";
}

}  // namespace gpumem

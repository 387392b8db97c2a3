// The peer access the program enabled, per context, for memory the driver does not open to peers itself.
#include "context/peer_access.h"

#include <algorithm>

#include "base/fork_safe_lock.h"
#include "driver/real_driver.h"

namespace gpumem::shim::peer_access {
namespace {

struct Link {
  CUcontext accessor = nullptr;
  CUdevice accessor_device = 0;
  CUcontext peer = nullptr;
};

// Leaked, so hooks running during exit still find it. Invariant: no (accessor, peer) pair twice;
// read and changed under ProcessLock::peer_links.
std::vector<Link>& links() {
  static auto* table = new std::vector<Link>;
  return *table;
}

void forget_links_in_child() noexcept { links().clear(); }

// A forked child has none of its parent's contexts, so none of their links.
ProcessLockGuard lock_table() {
  reset_in_forked_child(&forget_links_in_child);
  return lock_fork_safely(ProcessLock::peer_links);
}

}  // namespace

void enabled(CUcontext accessor, CUdevice accessor_device, CUcontext peer) {
  const auto lock = lock_table();
  std::vector<Link>& table = links();
  const bool known = std::any_of(table.begin(), table.end(), [&](const Link& link) {
    return link.accessor == accessor && link.peer == peer;
  });
  if (!known) table.push_back(Link{accessor, accessor_device, peer});
}

void disabled(CUcontext accessor, CUcontext peer) {
  const auto lock = lock_table();
  std::erase_if(links(), [&](const Link& link) { return link.accessor == accessor && link.peer == peer; });
}

std::vector<CUcontext> forget(CUcontext context) {
  std::vector<CUcontext> affected;
  const auto lock = lock_table();
  affected.reserve(links().size());  // nothing throws while links are being removed
  std::erase_if(links(), [&](const Link& link) {
    if (link.accessor == context) affected.push_back(link.peer);
    return link.accessor == context || link.peer == context;
  });
  return affected;
}

std::vector<CUcontext> contexts_with_access(CUcontext peer) {
  std::vector<CUcontext> contexts;
  const auto lock = lock_table();
  for (const Link& link : links()) {
    if (link.peer == peer) contexts.push_back(link.accessor);  // no (accessor, peer) pair twice
  }
  return contexts;
}

std::vector<CUdevice> devices_with_access(CUcontext peer) {
  std::vector<CUdevice> devices;
  const auto lock = lock_table();
  for (const Link& link : links()) {
    if (link.peer == peer && std::find(devices.begin(), devices.end(), link.accessor_device) == devices.end()) {
      devices.push_back(link.accessor_device);
    }
  }
  return devices;
}

std::vector<CUdevice> devices_able_to_access(CUdevice device) {
  const RealDriver& driver = real_driver();
  std::vector<CUdevice> able;
  int count = 0;
  if (driver.cuDeviceGetCount == nullptr || driver.cuDeviceCanAccessPeer == nullptr ||
      driver.cuDeviceGetCount(&count) != CUDA_SUCCESS) {
    return able;
  }
  for (CUdevice other = 0; other < count; ++other) {
    int can_access = 0;
    if (other != device && driver.cuDeviceCanAccessPeer(&can_access, other, device) == CUDA_SUCCESS &&
        can_access == 1) {
      able.push_back(other);
    }
  }
  return able;
}

}  // namespace gpumem::shim::peer_access

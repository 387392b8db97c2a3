// platform mode: every request goes to the driver as is and freed memory goes back; only counted.
#pragma once

#include "memory_manager.h"

namespace gpumem::shim {

class PlatformManager final : public MemoryManager {
 public:
  using MemoryManager::MemoryManager;

 private:
  CUresult do_allocate(CUdeviceptr* out, std::size_t bytes) override;
  CUresult do_allocate_pitch(CUdeviceptr* out, std::size_t* pitch, std::size_t width_bytes,
                             std::size_t height, unsigned int element_size_bytes) override;
  CUresult do_free(CUdeviceptr ptr) override;
  CUresult do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) override;
  CUresult do_free_async(CUdeviceptr ptr, StreamArg stream) override;
  bool do_owns(CUdeviceptr /*ptr*/) const override { return false; }
  void do_context_synchronized(FenceId /*through*/) override {}
  const char* do_mode_name() const noexcept override { return "platform"; }
};

}  // namespace gpumem::shim

#include "platform_manager.h"

#include "real_driver.h"

namespace gpumem::shim {

CUresult PlatformManager::do_allocate(CUdeviceptr* out, std::size_t bytes) {
  return real_driver().cuMemAlloc_v2(out, bytes);
}

CUresult PlatformManager::do_allocate_pitch(CUdeviceptr* out, std::size_t* pitch, std::size_t width_bytes,
                                            std::size_t height, unsigned int element_size_bytes) {
  return real_driver().cuMemAllocPitch_v2(out, pitch, width_bytes, height, element_size_bytes);
}

CUresult PlatformManager::do_free(CUdeviceptr ptr) { return real_driver().cuMemFree_v2(ptr); }

CUresult PlatformManager::do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) {
  return driver_passthrough::mem_alloc_async(out, bytes, stream);
}

CUresult PlatformManager::do_free_async(CUdeviceptr ptr, StreamArg stream) {
  return driver_passthrough::mem_free_async(ptr, stream);
}

}  // namespace gpumem::shim

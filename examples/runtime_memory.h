// The runtime-API memory calls in the shape churn.h expects (see there).
#pragma once

#include <cstdint>

#include "check.h"

namespace examples {

struct RuntimeMemory {
  std::uint64_t allocate(std::size_t size) {
    void* pointer = nullptr;
    CHECK(cudaMalloc(&pointer, size));
    return reinterpret_cast<std::uintptr_t>(pointer);
  }
  void release(std::uint64_t address) { CHECK(cudaFree(reinterpret_cast<void*>(address))); }
  void upload(std::uint64_t address, const void* data, std::size_t size) {
    CHECK(cudaMemcpy(reinterpret_cast<void*>(address), data, size, cudaMemcpyHostToDevice));
  }
  void download(void* data, std::uint64_t address, std::size_t size) {
    CHECK(cudaMemcpy(data, reinterpret_cast<const void*>(address), size, cudaMemcpyDeviceToHost));
  }
};

}  // namespace examples

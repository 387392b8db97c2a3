// Maps the stream handle a program passes to a fence domain: the arena lets a chunk freed on a domain be
// reused at once by an allocation on the same domain, so two handles naming the same stream must map
// to the same domain and different streams to different domains. Domain 0 means "no stream".
//
// A destroyed stream's handle may later name a new stream, which then inherits the old domain's
// fenced chunks. That is safe: cuStreamDestroy releases a stream's resources, its handle included,
// only once the device has completed all work queued on it, so by the time a handle can be reused
// the work ordered before those frees has finished.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gpumem::shim {

// The legacy default stream: the NULL stream of the plain entry points and CU_STREAM_LEGACY.
inline constexpr std::uintptr_t kLegacyStreamDomain = 1;

// A per-thread default stream, told apart per thread by a small serial number. Stream handles are
// pointers aligned to at least 8 bytes, so values with low bits 0b010 never collide with them.
constexpr std::uintptr_t per_thread_stream_domain(std::uint64_t thread_serial) noexcept {
  return (static_cast<std::uintptr_t>(thread_serial) << 3) | 0x2;
}

// The calling thread's serial number (1, 2, ...), stable for the thread's life.
std::uint64_t this_thread_stream_serial() noexcept;

// `per_thread` is true for the _ptsz entry points, where stream 0 is the calling thread's default stream.
inline std::uintptr_t fence_domain(CUstream stream, bool per_thread) noexcept {
  if (stream == CU_STREAM_PER_THREAD || (stream == nullptr && per_thread)) {
    return per_thread_stream_domain(this_thread_stream_serial());
  }
  if (stream == nullptr || stream == CU_STREAM_LEGACY) return kLegacyStreamDomain;
  return reinterpret_cast<std::uintptr_t>(stream);
}

// The handle to give the plain (non-_ptsz) driver entry points for the same stream.
inline CUstream plain_stream_handle(CUstream stream, bool per_thread) noexcept {
  return (stream == nullptr && per_thread) ? CU_STREAM_PER_THREAD : stream;
}

}  // namespace gpumem::shim

// The memory managers' pure pieces: the pitch rule, stream -> fence-domain mapping, Status -> CUresult.
#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <thread>

#include "base/cuda_status.h"
#include "context/pitch.h"
#include "context/stream_domain.h"

using gpumem::Status;
using namespace gpumem::shim;

TEST_CASE("pitched_size rounds the row width up to the pitch alignment", "[mem][pitch]") {
  const auto exact = pitched_size(512, 3, 4);
  REQUIRE(exact);
  CHECK(exact->pitch == 512);
  CHECK(exact->bytes == 1536);

  const auto rounded = pitched_size(513, 2, 8);
  REQUIRE(rounded);
  CHECK(rounded->pitch == 1024);
  CHECK(rounded->bytes == 2048);

  const auto narrow = pitched_size(1, 1, 16);
  REQUIRE(narrow);
  CHECK(narrow->pitch == kPitchAlignment);
}

TEST_CASE("pitched_size refuses what the driver refuses as an invalid value", "[mem][pitch]") {
  CHECK_FALSE(pitched_size(0, 4, 4));
  CHECK_FALSE(pitched_size(64, 0, 4));
  CHECK_FALSE(pitched_size(64, 4, 1));
  CHECK_FALSE(pitched_size(64, 4, 2));
  CHECK_FALSE(pitched_size(64, 4, 32));
}

TEST_CASE("pitched_size: a size that overflows is too large, not invalid (the driver: out of memory)",
          "[mem][pitch]") {
  const auto huge_width = pitched_size(SIZE_MAX, 1, 4);  // the rounding would overflow
  REQUIRE(huge_width);
  CHECK_FALSE(huge_width->fits);
  const auto huge_product = pitched_size(1024, SIZE_MAX / 512, 4);  // pitch * height overflows
  REQUIRE(huge_product);
  CHECK_FALSE(huge_product->fits);
  CHECK(pitched_size(1024, SIZE_MAX / 1024, 4)->fits);  // the largest that fits
  CHECK_FALSE(pitched_size(0, SIZE_MAX, 4));            // invalid before too large, as the driver checks
}

TEST_CASE("the legacy default stream has one domain whatever its name", "[mem][streams]") {
  CHECK(fence_domain(nullptr, false) == kLegacyStreamDomain);
  CHECK(fence_domain(CU_STREAM_LEGACY, false) == kLegacyStreamDomain);
  CHECK(fence_domain(CU_STREAM_LEGACY, true) == kLegacyStreamDomain);
  CHECK(fence_domain(nullptr, false) != 0);  // 0 means "no stream" to the arena
}

TEST_CASE("a per-thread default stream is the same stream under both names, per thread",
          "[mem][streams]") {
  const std::uintptr_t mine = fence_domain(nullptr, true);
  CHECK(mine == fence_domain(CU_STREAM_PER_THREAD, false));
  CHECK(mine == fence_domain(CU_STREAM_PER_THREAD, true));
  CHECK(mine != kLegacyStreamDomain);
  CHECK(mine != 0);

  std::uintptr_t other = 0;
  std::thread([&other] { other = fence_domain(nullptr, true); }).join();
  CHECK(other != mine);
  CHECK(other != kLegacyStreamDomain);
}

TEST_CASE("a created stream is its own domain and never collides with the default streams",
          "[mem][streams]") {
  alignas(16) static char fake_stream_objects[4][16];
  std::set<std::uintptr_t> domains{fence_domain(nullptr, false), fence_domain(nullptr, true)};
  for (auto& object : fake_stream_objects) {
    auto* stream = reinterpret_cast<CUstream>(&object);
    CHECK(fence_domain(stream, false) == fence_domain(stream, true));
    domains.insert(fence_domain(stream, false));
  }
  CHECK(domains.size() == 6);
  CHECK(domains.count(0) == 0);
  for (std::uint64_t serial = 1; serial < 1000; ++serial) {
    CHECK(per_thread_stream_domain(serial) % 8 == 2);  // no 8-aligned stream object has this
  }
}

TEST_CASE("plain_stream_handle names the per-thread stream for the plain entry points", "[mem][streams]") {
  CHECK(plain_stream_handle(nullptr, true) == CU_STREAM_PER_THREAD);
  CHECK(plain_stream_handle(nullptr, false) == nullptr);
  CHECK(plain_stream_handle(CU_STREAM_LEGACY, true) == CU_STREAM_LEGACY);
}

TEST_CASE("Status maps to the driver's own error codes", "[mem][status]") {
  CHECK(to_cuda_result(Status::ok) == CUDA_SUCCESS);
  CHECK(to_cuda_result(Status::out_of_memory) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(to_cuda_result(Status::fences_pending) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(to_cuda_result(Status::zero_size) == CUDA_ERROR_INVALID_VALUE);
  CHECK(to_cuda_result(Status::not_owned) == CUDA_ERROR_INVALID_VALUE);
  CHECK(to_cuda_result(Status::double_free) == CUDA_ERROR_INVALID_VALUE);
  CHECK(to_cuda_result(Status::invalid_argument) == CUDA_ERROR_INVALID_VALUE);
}

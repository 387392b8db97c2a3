// Size arithmetic: rounding, the 21 XLA bins and the free-index classes.
#include <catch2/catch.hpp>

#include "bfc_arena.h"
#include "checked_size.h"
#include "size_class.h"

using namespace gpumem;
using namespace gpumem::detail;

TEST_CASE("requests round up to 256 bytes", "[size_class]") {
  CHECK(round_up(1) == 256);
  CHECK(round_up(255) == 256);
  CHECK(round_up(256) == 256);
  CHECK(round_up(257) == 512);
  CHECK(round_up(4 * kMiB + 1) == 4 * kMiB + 256);
  CHECK(round_down(511) == 256);
}

TEST_CASE("bins follow XLA's boundaries", "[size_class]") {
  for (int bin = 0; bin < kBinCount - 1; ++bin) {
    const std::size_t low = std::size_t{256} << bin;
    const std::size_t high = std::size_t{256} << (bin + 1);
    INFO("bin " << bin);
    CHECK(bin_min_size(bin) == low);
    CHECK(bin_index(low) == bin);
    CHECK(bin_index(high - 256) == bin);
    CHECK(bin_index(high) == bin + 1);
  }
  CHECK(bin_index(256 * kMiB - 256) == 19);
  CHECK(bin_index(256 * kMiB) == 20);
  CHECK(bin_index(std::size_t{1} << 40) == 20);
}

TEST_CASE("size classes are ordered and stay inside their bin", "[size_class]") {
  int previous = -1;
  for (std::size_t size = 256; size <= (std::size_t{1} << 34); size += size / 64 > 256 ? round_down(size / 64) : 256) {
    const int klass = class_index(size);
    INFO("size " << size);
    REQUIRE(klass >= previous);
    REQUIRE(klass < kClassCount);
    REQUIRE(klass / kSubclasses == bin_index(size));
    previous = klass;
  }
  CHECK(class_index(std::size_t{1} << 50) == kClassCount - 1);
}

TEST_CASE("status names are stable", "[status]") {
  CHECK(std::string(to_string(Status::ok)) == "ok");
  CHECK(std::string(to_string(Status::zero_size)) == "zero_size");
  CHECK(std::string(to_string(Status::out_of_memory)) == "out_of_memory");
  CHECK(std::string(to_string(Status::fences_pending)) == "fences_pending");
  CHECK(std::string(to_string(Status::not_owned)) == "not_owned");
  CHECK(std::string(to_string(Status::double_free)) == "double_free");
  CHECK(std::string(to_string(Status::invalid_argument)) == "invalid_argument");
}

TEST_CASE("checked sizes: sums, products and roundings past 2^64 are refused, never wrapped", "[checked]") {
  constexpr std::size_t kMax = SIZE_MAX;
  STATIC_REQUIRE(gpumem::checked_add<std::size_t>(kMax - 1, 1) == kMax);
  STATIC_REQUIRE(!gpumem::checked_add<std::size_t>(kMax, 1));
  STATIC_REQUIRE(!gpumem::checked_mul<std::size_t>(std::size_t{1} << 32, std::size_t{1} << 32));
  STATIC_REQUIRE(gpumem::checked_mul<std::size_t>(std::size_t{1} << 31, std::size_t{1} << 32) == std::size_t{1} << 63);
  STATIC_REQUIRE(gpumem::checked_round_up<std::size_t>(513, 512) == 1024);
  STATIC_REQUIRE(gpumem::checked_round_up<std::size_t>(1024, 512) == 1024);
  STATIC_REQUIRE(!gpumem::checked_round_up<std::size_t>(kMax - 3, 512));
  STATIC_REQUIRE(gpumem::checked_round_up<std::size_t>(0, 512) == 0);
  STATIC_REQUIRE(gpumem::fits_under<std::size_t>(10, 90, 100));
  STATIC_REQUIRE(!gpumem::fits_under<std::size_t>(10, 91, 100));
  STATIC_REQUIRE(!gpumem::fits_under<std::size_t>(10, kMax - 3, 100));  // 10 + (2^64 - 4) wraps to 6
  STATIC_REQUIRE(gpumem::saturating_sub<std::size_t>(3, 5) == 0);
  STATIC_REQUIRE(gpumem::saturating_add<std::size_t>(kMax, 5) == kMax);
  STATIC_REQUIRE(gpumem::saturating_mul<std::size_t>(kMax, 2) == kMax);
}

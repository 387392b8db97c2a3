// The per-device budget and the VMM ledger: pure bookkeeping, tested on its own.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "budget/device_budget.h"
#include "budget/vmm_ledger.h"

using gpumem::shim::BudgetPath;
using gpumem::shim::DeviceBudget;
using gpumem::shim::VmmLedger;

TEST_CASE("budget: nothing is charged before the limit is set; the first limit stays", "[budget]") {
  DeviceBudget budget;
  CHECK_FALSE(budget.try_charge(BudgetPath::arena, 1));
  CHECK(budget.set_limit(1000) == 1000);
  CHECK(budget.set_limit(5000) == 1000);  // a second context of the device shares the first's limit
  CHECK(budget.limit() == 1000);
}

TEST_CASE("budget: charges up to the limit, refunds, per path and peaks", "[budget]") {
  DeviceBudget budget;
  budget.set_limit(1000);
  CHECK(budget.try_charge(BudgetPath::arena, 600));
  CHECK(budget.try_charge(BudgetPath::vmm, 400));
  CHECK_FALSE(budget.try_charge(BudgetPath::managed, 1));
  CHECK(budget.charged() == 1000);
  CHECK(budget.available() == 0);
  budget.refund(BudgetPath::arena, 600);
  CHECK(budget.charged(BudgetPath::arena) == 0);
  CHECK(budget.charged(BudgetPath::vmm) == 400);
  CHECK(budget.peak_charged() == 1000);
  CHECK(budget.peak_charged(BudgetPath::arena) == 600);
  CHECK(budget.charges(BudgetPath::arena) == 1);
  CHECK(budget.bytes_charged_in_total(BudgetPath::vmm) == 400);
  CHECK(budget.charges(BudgetPath::managed) == 0);  // refused: not counted
  CHECK_FALSE(budget.try_charge(BudgetPath::driver, 601));
  CHECK(budget.try_charge(BudgetPath::driver, 600));
  CHECK_FALSE(budget.try_charge(BudgetPath::driver, static_cast<std::size_t>(-1)));  // no wrap-around
  CHECK(budget.available() == 0);
}

TEST_CASE("budget: force_charge may pass the limit and says so", "[budget]") {
  DeviceBudget budget;
  budget.set_limit(100);
  budget.force_charge(BudgetPath::arrays, 150);
  CHECK(budget.over_limit());
  CHECK(budget.available() == 0);
  budget.refund(BudgetPath::arrays, 150);
  CHECK_FALSE(budget.over_limit());
}

TEST_CASE("budget: charges and refunds near 2^64 saturate instead of wrapping", "[budget]") {
  DeviceBudget budget;
  budget.set_limit(1000);
  REQUIRE(budget.try_charge(BudgetPath::arena, 10));
  CHECK_FALSE(budget.try_charge(BudgetPath::driver, static_cast<std::size_t>(-4)));
  CHECK_FALSE(budget.try_charge(BudgetPath::driver, std::size_t{1} << 63));
  CHECK(budget.charged() == 10);
  budget.force_charge(BudgetPath::arrays, static_cast<std::size_t>(-1));  // over the limit, not back to 9
  CHECK(budget.over_limit());
  CHECK(budget.charged() == static_cast<std::size_t>(-1));
  budget.refund(BudgetPath::arrays, static_cast<std::size_t>(-1));
  budget.refund(BudgetPath::arena, 20);  // more than charged: 0, not 2^64 - 10
  CHECK(budget.charged() == 0);
  CHECK(budget.charged(BudgetPath::arena) == 0);
  CHECK(budget.available() == 1000);
}

TEST_CASE("budget: a charge attributed to another path counts there, and only the bytes moved", "[budget]") {
  DeviceBudget budget;
  budget.set_limit(10 << 20);
  REQUIRE(budget.try_charge(BudgetPath::pool_reserve, 2 << 20));  // a whole growth step
  budget.attribute(BudgetPath::pool_reserve, BudgetPath::async_pool, 7200);  // the block's bytes
  CHECK(budget.charged() == 2 << 20);
  CHECK(budget.charged(BudgetPath::async_pool) == 7200);
  CHECK(budget.peak_charged(BudgetPath::async_pool) == 7200);  // never the step
  CHECK(budget.charges(BudgetPath::async_pool) == 1);
  CHECK(budget.bytes_charged_in_total(BudgetPath::async_pool) == 7200);
  CHECK(budget.charges(BudgetPath::pool_reserve) == 0);
  CHECK(budget.charged(BudgetPath::pool_reserve) == (2 << 20) - 7200);
}

TEST_CASE("budget: concurrent charges never pass the limit", "[budget]") {
  DeviceBudget budget;
  budget.set_limit(10'000);
  std::vector<std::thread> threads;
  std::atomic<int> granted{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (budget.try_charge(BudgetPath::driver, 7)) granted.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(granted.load() == 10'000 / 7);
  CHECK(budget.charged() == static_cast<std::size_t>(granted.load()) * 7);
  CHECK(budget.charged() <= budget.limit());
}

TEST_CASE("vmm ledger: refunded once released and unmapped, in either order", "[budget][vmm]") {
  VmmLedger ledger;
  std::vector<std::pair<int, std::size_t>> refunds;
  auto refund = [&](int device, std::size_t bytes) { refunds.emplace_back(device, bytes); };

  SECTION("release, then unmap") {
    ledger.created(1, 0, 4096);
    ledger.mapped(0x10000, 4096, 1);
    CHECK_FALSE(ledger.released(1));  // still mapped: the memory lives on
    ledger.unmapped(0x10000, 4096, refund);
    REQUIRE(refunds.size() == 1);
    CHECK(refunds[0] == std::pair<int, std::size_t>{0, 4096});
  }
  SECTION("unmap, then release") {
    ledger.created(2, 1, 8192);
    ledger.mapped(0x20000, 8192, 2);
    ledger.unmapped(0x20000, 8192, refund);
    CHECK(refunds.empty());
    const auto charge = ledger.released(2);
    REQUIRE(charge);
    CHECK(charge->device == 1);
    CHECK(charge->bytes == 8192);
  }
  SECTION("a retained handle needs two releases; two mappings, one unmap covering both") {
    ledger.created(3, 0, 4096);
    ledger.mapped(0x30000, 2048, 3);
    ledger.mapped(0x30800, 2048, 3);
    ledger.retained(3);
    CHECK_FALSE(ledger.released(3));
    CHECK_FALSE(ledger.released(3));
    CHECK_FALSE(ledger.released(3));  // released more often than referenced: ignored
    ledger.unmapped(0x30000, 4096, refund);
    CHECK(refunds.size() == 1);
    CHECK(ledger.live_handles() == 0);
  }
  SECTION("handles it never saw and ranges with nothing mapped are ignored") {
    ledger.mapped(0x40000, 4096, 99);
    ledger.unmapped(0x40000, 4096, refund);
    CHECK_FALSE(ledger.released(99));
    CHECK(refunds.empty());
  }
}

// Sharing one GPU: the fair shares (hand-computed cases), the ledger file's checks, the directory
// rules, and members of a ledger in a temporary directory (joining, reserving, giving back, waiting,
// the dead told from the living), all without CUDA.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "policy/share_values.h"
#include "share/fair_share.h"
#include "share/ledger.h"
#include "share/ledger_format.h"
#include "share/member_identity.h"
#include "share/share_dir.h"

using namespace gpumem::shim::share;

namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr std::uint64_t GiB = MiB << 10;

std::vector<Share> shares_of(std::uint64_t capacity, const std::vector<Claim>& claims, SharesSummary* out = nullptr) {
  std::vector<Share> shares(claims.size());
  const SharesSummary summary = fair_shares(capacity, claims, shares);
  if (out != nullptr) *out = summary;
  return shares;
}

Claim growing(std::uint64_t held = 0, std::uint32_t weight_milli = 1000) {
  Claim claim;
  claim.held = held;
  claim.weight_milli = weight_milli;
  return claim;
}

Claim settled(std::uint64_t held) {
  Claim claim;
  claim.held = held;
  claim.demand = held;
  return claim;
}

// A fresh directory of this user for ledgers.
std::string temporary_dir() {
  char name[] = "/tmp/gpumem-share-test-XXXXXX";
  REQUIRE(mkdtemp(name) != nullptr);
  return name;
}

// Members are never freed (a process keeps its membership to the end, as the shim does): kept
// reachable here, in a list never destroyed, so that a leak checker looking at exit sees none.
std::vector<Member*>* const g_kept = new std::vector<Member*>();

Member* join(const JoinRequest& request, std::string& error) {
  Member* member = Member::join(request, error);
  if (member != nullptr) g_kept->push_back(member);
  return member;
}

JoinRequest request_in(const std::string& dir, std::uint64_t total = 16 * GiB) {
  JoinRequest request;
  request.device = 0;
  const char name[] = "unittest-gpu-01";
  std::memcpy(request.uuid, name, 16);
  request.device_total = total;
  request.dir = dir;
  return request;
}

// The driver's free memory as the shim reads it: the ledger's generation first.
FreeReading read_free(const Member* member, std::uint64_t free) { return FreeReading(free, member->generation()); }

}  // namespace

TEST_CASE("fair shares: equal weights split the device", "[share][fair]") {
  const auto shares = shares_of(16 * GiB, {growing(), growing()});
  CHECK(shares[0].guarantee == 8 * GiB);
  CHECK(shares[1].guarantee == 8 * GiB);
  // Nothing held: each may borrow everything that is free.
  CHECK(shares[0].allowance == 16 * GiB);
}

TEST_CASE("fair shares: weights", "[share][fair]") {
  const auto shares = shares_of(16 * GiB, {growing(0, 1000), growing(0, 3000)});
  CHECK(shares[0].guarantee == 4 * GiB);
  CHECK(shares[1].guarantee == 12 * GiB);
  const auto halves = shares_of(10 * GiB, {growing(0, 500), growing(0, 2000)});
  CHECK(halves[0].guarantee == 2 * GiB);
  CHECK(halves[1].guarantee == 8 * GiB);
}

TEST_CASE("fair shares: a settled member's share goes to the growing ones (max-min)", "[share][fair]") {
  // A holds 2 GiB and asks for nothing more; B and C grow: 14 - 2 split between them.
  const auto shares = shares_of(14 * GiB, {settled(2 * GiB), growing(), growing()});
  CHECK(shares[0].guarantee == 2 * GiB);
  CHECK(shares[1].guarantee == 6 * GiB);
  CHECK(shares[2].guarantee == 6 * GiB);
  // Settled above its equal part, it keeps only the equal part.
  const auto capped = shares_of(12 * GiB, {settled(10 * GiB), growing(), growing()});
  CHECK(capped[0].guarantee == 4 * GiB);
  CHECK(capped[1].guarantee == 4 * GiB);
}

TEST_CASE("fair shares: demands below the device leave memory free", "[share][fair]") {
  SharesSummary summary;
  const auto shares = shares_of(16 * GiB, {settled(2 * GiB), settled(3 * GiB)}, &summary);
  CHECK(shares[0].guarantee == 2 * GiB);
  CHECK(shares[1].guarantee == 3 * GiB);
  CHECK(summary.free == 11 * GiB);
  CHECK(summary.held == 5 * GiB);
  CHECK(shares[0].allowance == 13 * GiB);  // what it holds plus all that is free
}

TEST_CASE("fair shares: floors first, scaled when they do not fit", "[share][fair]") {
  Claim a = growing();
  a.floor = 10 * GiB;
  SharesSummary summary;
  const auto shares = shares_of(16 * GiB, {a, growing()}, &summary);
  CHECK(shares[0].guarantee == 13 * GiB);  // 10 + half of the 6 left
  CHECK(shares[1].guarantee == 3 * GiB);
  CHECK_FALSE(summary.floors_scaled);

  Claim b = growing();
  b.floor = 12 * GiB;
  a.floor = 12 * GiB;
  const auto scaled = shares_of(16 * GiB, {a, b, growing()}, &summary);
  CHECK(summary.floors_scaled);
  CHECK(scaled[0].guarantee == 8 * GiB);
  CHECK(scaled[1].guarantee == 8 * GiB);
  CHECK(scaled[2].guarantee == 0);

  // A floor holds even for a member asking for nothing now.
  Claim idle = settled(0);
  idle.floor = 4 * GiB;
  const auto kept = shares_of(16 * GiB, {idle, growing()});
  CHECK(kept[0].guarantee == 4 * GiB);
  CHECK(kept[1].guarantee == 12 * GiB);
}

TEST_CASE("fair shares: a cap bounds guarantee and allowance", "[share][fair]") {
  Claim a = growing();
  a.cap = 4 * GiB;
  const auto shares = shares_of(16 * GiB, {a, growing()});
  CHECK(shares[0].guarantee == 4 * GiB);
  CHECK(shares[0].allowance == 4 * GiB);
  CHECK(shares[1].guarantee == 12 * GiB);
}

TEST_CASE("fair shares: rounding loses no byte", "[share][fair]") {
  const auto shares = shares_of(10, {growing(), growing(), growing()});
  CHECK(shares[0].guarantee + shares[1].guarantee + shares[2].guarantee == 10);
  for (const Share& share : shares) CHECK((share.guarantee == 3 || share.guarantee == 4));
  const auto weighted = shares_of(7, {growing(0, 1000), growing(0, 2000)});
  CHECK(weighted[0].guarantee + weighted[1].guarantee == 7);
  CHECK(weighted[1].guarantee >= 4);
}

TEST_CASE("fair shares: a waiting member stops the others from borrowing", "[share][fair]") {
  Claim waiter = growing(2 * GiB);
  waiter.waiting = true;
  const Claim borrower = growing(12 * GiB);
  SharesSummary summary;
  const auto shares = shares_of(16 * GiB, {waiter, borrower}, &summary);
  CHECK(summary.someone_waits);
  CHECK(shares[1].guarantee == 8 * GiB);
  CHECK(shares[1].allowance == 8 * GiB);  // below what it holds: it grows no further
  CHECK(shares[0].allowance == 8 * GiB);  // max(8, 2 + 2 free)
  // Without the wait the borrower could take what is free.
  const auto calm = shares_of(16 * GiB, {growing(2 * GiB), borrower});
  CHECK(calm[1].allowance == 14 * GiB);
}

TEST_CASE("fair shares: empty and single", "[share][fair]") {
  const auto none = shares_of(16 * GiB, {});
  CHECK(none.empty());
  const auto one = shares_of(16 * GiB, {growing(3 * GiB)});
  CHECK(one[0].guarantee == 16 * GiB);
  CHECK(one[0].allowance == 16 * GiB);
}

TEST_CASE("reclaim requests: the shortfall split by what each borrowed", "[share][fair]") {
  // Capacity 16: the waiter holds 4 of its 8 and wants 4 more; B holds 9 of 4, C 3 of 4 (lends), D 4 of 1.
  const std::vector<Claim> claims{growing(4 * GiB), growing(9 * GiB), growing(3 * GiB), growing(4 * GiB)};
  std::vector<Share> shares{{8 * GiB, 0}, {4 * GiB, 0}, {4 * GiB, 0}, {1 * GiB, 0}};
  // Held 20 > 16 (stale sums are clamped by the caller; here the arithmetic is what matters).
  std::array<std::uint64_t, 4> requests{};
  const std::uint64_t total = reclaim_requests(16 * GiB, claims, shares, 0, 4 * GiB, 4 * GiB, requests);
  // Shortfall: 20 + 4 - 16 = 8, borrowed 5 + 3 = 8: each gives back all it borrowed.
  CHECK(requests[0] == 0);
  CHECK(requests[1] == 5 * GiB);
  CHECK(requests[2] == 0);
  CHECK(requests[3] == 3 * GiB);
  CHECK(total == 8 * GiB);
  // A smaller shortfall, in proportion: 2 GiB over borrowings of 5 and 3 -> 1.25 and 0.75 GiB.
  const std::vector<Claim> less{growing(4 * GiB), growing(9 * GiB), growing(0), growing(4 * GiB)};
  const std::uint64_t asked = reclaim_requests(16 * GiB, less, shares, 0, 1 * GiB, 1 * GiB, requests);
  CHECK(requests[1] == 1280 * MiB);
  CHECK(requests[3] == 768 * MiB);
  CHECK(asked == 2 * GiB);
  // Nothing short: nothing asked.
  const std::vector<Claim> alone{growing(1 * GiB)};
  CHECK(reclaim_requests(16 * GiB, alone, std::vector<Share>{{16 * GiB, 0}}, 0, 1 * GiB, 1 * GiB, requests) == 0);
}

TEST_CASE("reclaim requests: the whole need, idle memory lent for what the guarantee does not hold",
          "[share][fair]") {
  // Capacity 16: A (the waiter) holds 2 of its 8; B holds 10 (2 borrowed, 4 of them idle); C holds 4 of
  // its 4, 3 idle (a preallocation it does not use).
  Claim b = growing(10 * GiB);
  b.idle = 4 * GiB;
  Claim c = growing(4 * GiB);
  c.idle = 3 * GiB;
  const std::vector<Claim> claims{growing(2 * GiB), b, c};
  const std::vector<Share> shares{{8 * GiB, 0}, {8 * GiB, 0}, {4 * GiB, 0}};
  std::array<std::uint64_t, 3> requests{};
  // A needs 6 (all inside its guarantee): held 16 + 6 - 16 = 6 short, B borrowed only 2 -> B owes 2;
  // the other 4 are lent from idle memory: B has 2 idle left, C 3 -> split 2:3 of 4, rounded up.
  const std::uint64_t total = reclaim_requests(16 * GiB, claims, shares, 0, 6 * GiB, 6 * GiB, requests);
  CHECK(requests[0] == 0);
  CHECK(requests[1] == 2 * GiB + (4 * GiB * 2 + 4) / 5);
  CHECK(requests[2] == (4 * GiB * 3 + 4) / 5);
  CHECK(total == requests[1] + requests[2]);
  CHECK(total >= 6 * GiB);  // the whole shortfall at once, not one block
  // Beyond the guarantee nothing is owed: all of it is lent, never more than each holds idle.
  std::array<std::uint64_t, 3> lent{};
  const std::uint64_t asked = reclaim_requests(16 * GiB, claims, shares, 0, 0, 20 * GiB, lent);
  CHECK(lent[1] == 4 * GiB);
  CHECK(lent[2] == 3 * GiB);
  CHECK(asked == 7 * GiB);
  // A member that waits itself lends nothing.
  Claim waiting = c;
  waiting.waiting = true;
  std::array<std::uint64_t, 3> spared{};
  reclaim_requests(16 * GiB, std::vector<Claim>{growing(2 * GiB), b, waiting}, shares, 0, 0, 2 * GiB, spared);
  CHECK(spared[2] == 0);
  CHECK(spared[1] == 2 * GiB);
}

TEST_CASE("share values: weights and durations", "[share][policy]") {
  using gpumem::parse_duration_ms;
  using gpumem::parse_share_weight_milli;
  CHECK(parse_share_weight_milli("1") == 1000u);
  CHECK(parse_share_weight_milli("0.5") == 500u);
  CHECK(parse_share_weight_milli("2.125") == 2125u);
  CHECK(parse_share_weight_milli("1000") == 1000000u);
  for (const char* bad : {"0", "0.000", "-1", "1.2345", "1001", "1e3", "", "x", "1.", ".5", "1 "}) {
    INFO(bad);
    CHECK_FALSE(parse_share_weight_milli(bad));
  }
  CHECK(parse_duration_ms("0") == 0u);
  CHECK(parse_duration_ms("500ms") == 500u);
  CHECK(parse_duration_ms("5s") == 5000u);
  CHECK(parse_duration_ms("1.5 s") == 1500u);
  CHECK(parse_duration_ms("0.5MS") == 0u);
  CHECK(parse_duration_ms("3600s") == 3600000u);
  for (const char* bad : {"5", "3601s", "-1s", "5m", "5 sec", "s", "1.s", "0ms0"}) {
    INFO(bad);
    CHECK_FALSE(parse_duration_ms(bad));
  }
}

TEST_CASE("ledger format: headers are checked before use", "[share][format]") {
  std::uint8_t uuid[16] = {1, 2, 3};
  std::uint8_t other[16] = {9};
  LedgerHeader header{};
  CHECK(check_header(header, 0, 16 * GiB, uuid) == HeaderCheck::uninitialised);
  CHECK(check_header(header, kLedgerFileBytes, 16 * GiB, uuid) == HeaderCheck::uninitialised);
  initialise_header(header, 16 * GiB, uuid);
  CHECK(check_header(header, kLedgerFileBytes, 16 * GiB, uuid) == HeaderCheck::valid);
  CHECK(check_header(header, kLedgerFileBytes - 1, 16 * GiB, uuid) == HeaderCheck::malformed);
  CHECK(check_header(header, 10, 16 * GiB, uuid) == HeaderCheck::malformed);
  CHECK(check_header(header, kLedgerFileBytes, 8 * GiB, uuid) == HeaderCheck::other_total);
  CHECK(check_header(header, kLedgerFileBytes, 16 * GiB, other) == HeaderCheck::other_gpu);
  LedgerHeader newer = header;
  newer.version = 7;
  CHECK(check_header(newer, kLedgerFileBytes, 16 * GiB, uuid) == HeaderCheck::other_version);
  CHECK_THAT(describe(HeaderCheck::other_version, newer), Catch::Contains("format 7"));
  LedgerHeader odd = header;
  odd.slot_count = 12;
  CHECK(check_header(odd, kLedgerFileBytes, 16 * GiB, uuid) == HeaderCheck::malformed);
  odd = header;
  odd.slot_bytes = 128;
  CHECK(check_header(odd, kLedgerFileBytes, 16 * GiB, uuid) == HeaderCheck::malformed);
  LedgerHeader alien = header;
  std::memcpy(alien.magic, "SOMETHIN", 8);
  CHECK(check_header(alien, kLedgerFileBytes, 16 * GiB, uuid) == HeaderCheck::not_a_ledger);
  CHECK(ledger_file_name(uuid) == "gpu-01020300000000000000000000000000.ledger");
  CHECK(uuid_text(uuid) == "GPU-01020300-0000-0000-0000-000000000000");
}

TEST_CASE("ledger format: a slot's figures are clamped", "[share][format]") {
  LedgerSlot slot{};
  slot.held = UINT64_MAX;
  slot.min_bytes = UINT64_MAX;
  slot.weight_milli = 0;
  slot.cap_bytes = 0;
  slot.active_until_ns = 100;
  Claim claim = claim_of(slot, 16 * GiB, 50);
  CHECK(claim.held == 16 * GiB);
  CHECK(claim.floor == 16 * GiB);
  CHECK(claim.weight_milli == 1000u);
  CHECK(claim.cap == 16 * GiB);
  CHECK(claim.demand == kUnbounded);  // still growing at 50 < 100
  claim = claim_of(slot, 16 * GiB, 200);
  CHECK(claim.demand == 16 * GiB);  // settled: what it holds
  slot.weight_milli = 5'000'000;
  CHECK(claim_of(slot, 16 * GiB, 0).weight_milli == 1000u);
  std::memcpy(slot.comm, "py\x01thon\0zz", 10);
  CHECK(comm_of(slot) == "py\\x01thon");
}

TEST_CASE("share directory: the default is made private; unsafe ones are refused", "[share][dir]") {
  std::string why;
  const std::string base = temporary_dir();
  const auto dir = open_share_dir(base, why);
  REQUIRE(dir);
  CHECK_FALSE(dir->group);
  CHECK(open_share_dir(base + "/missing", why) == std::nullopt);
  CHECK_THAT(why, Catch::Contains("cannot be read"));
  REQUIRE(symlink(base.c_str(), (base + "/link").c_str()) == 0);
  CHECK(open_share_dir(base + "/link", why) == std::nullopt);
  CHECK_THAT(why, Catch::Contains("symbolic link"));
  const std::string file = base + "/file";
  close(open(file.c_str(), O_CREAT | O_WRONLY, 0600));
  CHECK(open_share_dir(file, why) == std::nullopt);
  CHECK_THAT(why, Catch::Contains("not a directory"));
  const std::string open_to_all = base + "/all";
  REQUIRE(mkdir(open_to_all.c_str(), 0700) == 0);
  REQUIRE(chmod(open_to_all.c_str(), 0777) == 0);
  CHECK(open_share_dir(open_to_all, why) == std::nullopt);
  CHECK_THAT(why, Catch::Contains("writable by every user"));
  const std::string group = base + "/group";
  REQUIRE(mkdir(group.c_str(), 0700) == 0);
  REQUIRE(chmod(group.c_str(), 02770) == 0);
  const auto group_dir = open_share_dir(group, why);
  if (geteuid() == 0) {  // root made it: a group directory
    REQUIRE(group_dir);
    CHECK(group_dir->group);
  } else {  // this user's own setgid directory is no group directory: its group could plant ledgers
    CHECK(group_dir == std::nullopt);
    CHECK_THAT(why, Catch::Contains("no group directory"));
  }
  // Group writable without setgid: another member of the group could plant a ledger there.
  const std::string group_writable = base + "/group-writable";
  REQUIRE(mkdir(group_writable.c_str(), 0700) == 0);
  REQUIRE(chmod(group_writable.c_str(), 0770) == 0);
  CHECK(open_share_dir(group_writable, why) == std::nullopt);
  CHECK_THAT(why, Catch::Contains("writable by its group") && Catch::Contains("no group directory"));
  CHECK_THAT(default_share_dir(), Catch::Matches("/(dev/shm|tmp)/gpumem-[0-9]+"));
}

TEST_CASE("ledger: join, reserve within the allowance, give back", "[share][ledger]") {
  const std::string dir = temporary_dir();
  std::string error;
  Member* member = join(request_in(dir), error);
  INFO(error);
  REQUIRE(member != nullptr);
  CHECK(member->terms().guarantee == 16 * GiB);
  CHECK(member->figures().members_at_join == 1);
  CHECK(member->reserve(4 * GiB, std::nullopt).outcome == Outcome::reserved);
  member->answered(4 * GiB);  // the driver served it
  CHECK(member->terms().held == 4 * GiB);
  CHECK(member->reserve(13 * GiB, std::nullopt).outcome == Outcome::refused);  // beyond the device
  member->give_back(4 * GiB);
  CHECK(member->terms().held == 0);
  member->give_back(1);  // more than held: clamped at zero, never below
  CHECK(member->terms().held == 0);
  // What the driver says is free bounds the capacity: 0.5 GiB used outside the ledger (a context,
  // say), and as much again kept for one more process's context.
  CHECK(member->reserve(1 * GiB, read_free(member, 15 * GiB + GiB / 2)).outcome == Outcome::reserved);
  member->answered(1 * GiB);
  CHECK(member->terms().capacity == 15 * GiB);
  CHECK(member->reserve(14 * GiB + 1, std::nullopt).outcome == Outcome::refused);
  // The room kept is at most 1/32 of the device, whatever others outside the ledger use (7 GiB here).
  CHECK(member->reserve(1 * GiB, read_free(member, 8 * GiB)).outcome == Outcome::reserved);
  CHECK(member->terms().capacity == 16 * GiB - 7 * GiB - GiB / 2);
  struct stat st {};
  REQUIRE(stat(member->path().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(static_cast<std::size_t>(st.st_size) == kLedgerFileWithIdentityBytes);
  const std::uint64_t updates = member->figures().ledger_updates;
  CHECK(member->reclaim_requested() == 0);  // a read of the mapped word: no update
  CHECK(member->figures().ledger_updates == updates);
}

TEST_CASE("ledger: sizes near 2^64 are refused and leave the holding as it was", "[share][ledger]") {
  const std::string dir = temporary_dir();
  std::string error;
  Member* member = join(request_in(dir), error);
  INFO(error);
  REQUIRE(member != nullptr);
  REQUIRE(member->reserve(1 * GiB, std::nullopt).outcome == Outcome::reserved);
  member->answered(1 * GiB);
  // held + bytes wraps past 2^64 to less than the allowance: it must not be taken for a fit.
  for (const std::uint64_t bytes : {UINT64_MAX, UINT64_MAX - 3, UINT64_MAX - GiB + 1, std::uint64_t{1} << 63}) {
    CHECK(member->reserve(bytes, std::nullopt).outcome == Outcome::refused);
    CHECK(member->terms().held == 1 * GiB);
  }
  member->force_reserve(UINT64_MAX);  // saturates at the device, never wraps below what is held
  CHECK(member->terms().held == 16 * GiB);
}

TEST_CASE("ledger: memory reserved but not yet from the driver leaves the estimate of the rest alone",
          "[share][ledger]") {
  const std::string dir = temporary_dir();
  std::string error;
  Member* first = join(request_in(dir), error);
  REQUIRE(first != nullptr);
  // Half a GiB outside the ledger (a context), and as much again kept for one more.
  REQUIRE(first->reserve(1 * GiB, read_free(first, 15 * GiB + GiB / 2)).outcome == Outcome::reserved);
  first->answered(1 * GiB);
  CHECK(first->terms().capacity == 15 * GiB);
  // 8 GiB reserved; the driver has not served them yet, so it still says 14.5 GiB are free.
  REQUIRE(first->reserve(8 * GiB, read_free(first, 14 * GiB + GiB / 2)).outcome == Outcome::reserved);
  JoinRequest second_request = request_in(dir);
  second_request.device_free = 14 * GiB + GiB / 2;
  second_request.outside_settle_ns = 0;  // a lower reading is believed at once
  Member* second = join(second_request, error);
  INFO(error);
  REQUIRE(second != nullptr);
  // Read as if the 8 GiB were on the device, nothing would lie outside and the members would share
  // the whole device; they share it less the context and the room for one more (half of it each).
  CHECK(second->terms().capacity == 16 * GiB - GiB / 2 - GiB / 4);
  // The driver served them: the same figure.
  first->answered(8 * GiB);
  CHECK(second->reserve(GiB, read_free(second, 6 * GiB + GiB / 2)).outcome == Outcome::reserved);
  second->answered(GiB);
  CHECK(second->terms().capacity == 16 * GiB - GiB / 2 - GiB / 4);
}

TEST_CASE("ledger: one low reading does not lower the estimate; readings low for long enough do",
          "[share][ledger]") {
  const std::string dir = temporary_dir();
  JoinRequest request = request_in(dir);
  request.outside_settle_ns = 200'000'000;
  std::string error;
  Member* member = join(request, error);
  REQUIRE(member != nullptr);
  REQUIRE(member->reserve(0, read_free(member, 14 * GiB)).outcome == Outcome::reserved);  // 2 GiB outside
  CHECK(member->terms().capacity == 14 * GiB - GiB / 2);  // the room kept: at most 1/32 of the device
  REQUIRE(member->reserve(4 * GiB, 14 * GiB).outcome == Outcome::reserved);
  member->answered(4 * GiB);
  // 4 GiB freed by the driver and not yet given back: one reading says nothing lies outside.
  REQUIRE(member->reserve(GiB, 14 * GiB).outcome == Outcome::reserved);
  member->answered(GiB);
  CHECK(member->terms().capacity == 14 * GiB - GiB / 2);
  // Readings that agree, 1 GiB outside, for longer than outside_settle_ns: lowered to the highest.
  member->give_back(5 * GiB);
  const std::uint64_t started = monotonic_ns();
  while (monotonic_ns() - started < 300'000'000) {
    REQUIRE(member->reserve(GiB, 15 * GiB).outcome == Outcome::reserved);
    member->answered(GiB);
    member->give_back(GiB);
    sleep_for_ns(20'000'000);
  }
  CHECK(member->reserve(GiB, 15 * GiB).outcome == Outcome::reserved);
  CHECK(member->terms().capacity == 15 * GiB - GiB / 2);
}

namespace {
std::atomic<std::uint64_t> g_free_for_join{0};
std::optional<std::uint64_t> free_for_join(int /*device*/) { return g_free_for_join.load(); }
}  // namespace

TEST_CASE("ledger: a joiner's own reading counts its context at once", "[share][ledger]") {
  const std::string dir = temporary_dir();
  std::string error;
  Member* first = join(request_in(dir), error);
  REQUIRE(first != nullptr);
  REQUIRE(first->reserve(GiB, read_free(first, 15 * GiB)).outcome == Outcome::reserved);  // 1 GiB outside
  first->answered(GiB);
  // A second process, whose context took another GiB: join() reads the driver after the generation.
  JoinRequest request = request_in(dir);
  request.read_device_free = free_for_join;
  g_free_for_join = 13 * GiB;
  Member* second = join(request, error);
  REQUIRE(second != nullptr);
  CHECK(second->terms().capacity == 14 * GiB - GiB / 2);
  // A reading handed in from before is not coherent: a third context is not counted yet.
  JoinRequest late = request_in(dir);
  late.device_free = 12 * GiB;
  Member* third = join(late, error);
  REQUIRE(third != nullptr);
  CHECK(third->terms().capacity == 14 * GiB - GiB / 2);
}

TEST_CASE("ledger: a quiet reading lowers the estimate at once", "[share][ledger]") {
  // Processes that used the device have gone (their contexts with them): a member alone, with nothing
  // reserving and no change to the ledger since its reading, believes a lower reading at once.
  const std::string dir = temporary_dir();
  std::string error;
  Member* member = join(request_in(dir), error);
  REQUIRE(member != nullptr);
  REQUIRE(member->reserve(0, read_free(member, 12 * GiB)).outcome == Outcome::reserved);  // 4 GiB outside
  CHECK(member->terms().capacity == 12 * GiB - GiB / 2);
  // A reading without the generation read before it is not coherent: kept.
  REQUIRE(member->reserve(GiB, 15 * GiB).outcome == Outcome::reserved);
  member->answered(GiB);
  CHECK(member->terms().capacity == 12 * GiB - GiB / 2);
  // A quiet one: 16 - 14 - 1 = 1 GiB outside.
  REQUIRE(member->reserve(GiB, read_free(member, 14 * GiB)).outcome == Outcome::reserved);
  CHECK(member->terms().capacity == 15 * GiB - GiB / 2);
  // With a reservation not yet answered, a reading is not quiet.
  REQUIRE(member->reserve(GiB, read_free(member, 14 * GiB)).outcome == Outcome::reserved);
  CHECK(member->terms().capacity == 15 * GiB - GiB / 2);
}

TEST_CASE("ledger: reservations racing the estimate never make the device look larger", "[share][ledger]") {
  // Two members (threads) reserve, take from a simulated driver, free and give back, each reading the
  // driver's free memory before it reserves, as the shim does. 1 GiB lies outside the ledger.
  const std::string dir = temporary_dir();
  constexpr std::uint64_t kTotal = 16 * GiB;
  constexpr std::uint64_t kOutside = 1 * GiB;
  constexpr std::uint64_t kBlock = 256 * MiB;
  std::atomic<std::uint64_t> device_used{kOutside};
  std::atomic<std::uint64_t> largest_capacity{0};
  std::string error;
  std::array<Member*, 2> members{};
  for (Member*& member : members) {
    JoinRequest request = request_in(dir, kTotal);
    request.device_free = kTotal - device_used.load();
    member = join(request, error);
    REQUIRE(member != nullptr);
  }
  // A joiner's own reading is not coherent (taken before it could read the generation): the first
  // reservation's reading is what tells the members how much lies outside.
  REQUIRE(members[0]->reserve(0, read_free(members[0], kTotal - device_used.load())).outcome == Outcome::reserved);
  const auto run = [&](Member* member) {
    std::vector<std::uint64_t> blocks;
    const std::uint64_t until = monotonic_ns() + 1'000'000'000;
    for (unsigned step = 0; monotonic_ns() < until; ++step) {
      if (blocks.size() < 12 && step % 3 != 2) {
        const Reservation reservation = member->reserve(kBlock, read_free(member, kTotal - device_used.load()));
        std::uint64_t seen = largest_capacity.load();
        while (seen < reservation.terms.capacity && !largest_capacity.compare_exchange_weak(seen, reservation.terms.capacity)) {
        }
        if (reservation.outcome != Outcome::reserved) continue;
        device_used += kBlock;  // the driver's allocation
        member->answered(kBlock);
        blocks.push_back(kBlock);
      } else if (!blocks.empty()) {
        device_used -= kBlock;  // the driver's free, then the ledger
        member->give_back(kBlock);
        blocks.pop_back();
      }
    }
    for (std::uint64_t block : blocks) {
      device_used -= block;
      member->give_back(block);
    }
  };
  std::thread other(run, members[1]);
  run(members[0]);
  other.join();
  CHECK(largest_capacity.load() > 0);
  CHECK(largest_capacity.load() <= kTotal - kOutside);
}

namespace {

// Another process on the same GPU: a child that joins the ledger in `dir`, reserves `bytes` and then,
// for `linger_ms`, serves requests to give back (every 10 ms) unless `deaf`. Killed when it goes.
class Neighbour {
 public:
  // `lender`: as a member with a reclaim thread, it says all it holds is idle and sleeps on its futex
  // word between requests instead of looking every 10 ms.
  Neighbour(const std::string& dir, std::uint64_t bytes, int linger_ms = 60000, bool deaf = false,
            bool lender = false) {
    REQUIRE(pipe(fds_) == 0);
    pid_ = fork();
    if (pid_ == 0 && lender) lend(dir, bytes, linger_ms);
    if (pid_ == 0) run(dir, bytes, linger_ms, deaf);
    char status = 0;
    REQUIRE(read(fds_[0], &status, 1) == 1);
    REQUIRE(status == 'y');
  }
  ~Neighbour() {
    if (pid_ > 0) kill();
    close(fds_[0]);
    close(fds_[1]);
  }
  void kill() {
    ::kill(pid_, SIGKILL);
    REQUIRE(waitpid(pid_, nullptr, 0) == pid_);
    pid_ = -1;
  }

 private:
  [[noreturn]] void run(const std::string& dir, std::uint64_t bytes, int linger_ms, bool deaf) {
    std::string error;
    Member* member = join(request_in(dir), error);
    const char status = member != nullptr && member->reserve(bytes, std::nullopt).outcome == Outcome::reserved ? 'y' : 'n';
    if (write(fds_[1], &status, 1) != 1) _exit(2);
    for (int waited = 0; waited < linger_ms; waited += 10) {
      if (!deaf && member != nullptr && member->reclaim_requested() != 0) {
        const std::uint64_t asked = member->reclaim_requested();
        member->give_back(asked);
        member->reclaim_served(asked);
      }
      usleep(10000);
    }
    _exit(0);
  }

  [[noreturn]] void lend(const std::string& dir, std::uint64_t bytes, int linger_ms) {
    std::string error;
    Member* member = join(request_in(dir), error);
    const bool ok = member != nullptr && member->reserve(bytes, std::nullopt).outcome == Outcome::reserved;
    if (ok) {
      member->enable_reclaim_thread();
      member->note_idle(bytes);
    }
    const char status = ok ? 'y' : 'n';
    if (write(fds_[1], &status, 1) != 1) _exit(2);
    std::uint64_t idle = bytes;
    const std::uint64_t until = monotonic_ns() + static_cast<std::uint64_t>(linger_ms) * 1'000'000;
    while (ok && monotonic_ns() < until) {
      const std::uint32_t wake = member->reclaim_wake();
      const std::uint64_t asked = std::min(member->reclaim_requested(), idle);
      if (asked != 0) {
        member->give_back(asked);
        idle -= asked;
        member->reclaim_answered(asked, idle, wake);
      }
      member->wait_for_reclaim_wake(wake, 1'000'000'000);  // no polling: a request wakes it
    }
    _exit(0);
  }

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
};

}  // namespace

TEST_CASE("ledger: the dead are told from the living by their slot lock", "[share][ledger]") {
  const std::string dir = temporary_dir();
  Neighbour holder(dir, 12 * GiB);
  std::string error;
  Member* member = join(request_in(dir), error);
  REQUIRE(member != nullptr);
  CHECK(member->figures().members_at_join == 2);
  CHECK(member->terms().guarantee == 8 * GiB);
  // Inside its guarantee but the holder has it: not now.
  CHECK(member->reserve(6 * GiB, std::nullopt).outcome == Outcome::within_guarantee);
  CHECK_THAT(member->holders(), Catch::Contains("2 processes share") && Catch::Contains("holds 12884901888"));
  holder.kill();
  // The next refusal finds the holder dead and drops its charge at once.
  CHECK(member->reserve(6 * GiB, std::nullopt).outcome == Outcome::reserved);
  CHECK(member->terms().guarantee == 16 * GiB);
}

TEST_CASE("ledger: a waiting member asks the borrower back and gets its guarantee", "[share][ledger]") {
  const std::string dir = temporary_dir();
  Neighbour borrower(dir, 14 * GiB, 5000);
  std::string error;
  Member* member = join(request_in(dir), error);
  REQUIRE(member != nullptr);
  CHECK(member->reserve(4 * GiB, std::nullopt).outcome == Outcome::within_guarantee);
  const std::uint64_t started = monotonic_ns();
  CHECK(member->wait_and_reserve(4 * GiB, 3'000'000'000).outcome == Outcome::reserved);
  CHECK(monotonic_ns() - started < 2'000'000'000);  // the borrower looks every 10 ms
  CHECK(member->terms().held == 4 * GiB);
  // Beyond the guarantee nothing is waited for.
  CHECK(member->wait_and_reserve(8 * GiB, 1'000'000'000).outcome == Outcome::refused);
}

TEST_CASE("ledger: idle memory of a member with a reclaim thread is lent beyond the guarantee",
          "[share][ledger]") {
  const std::string dir = temporary_dir();
  Neighbour lender(dir, 8 * GiB, 10000, /*deaf=*/false, /*lender=*/true);
  std::string error;
  Member* member = join(request_in(dir), error);
  REQUIRE(member != nullptr);
  REQUIRE(member->terms().guarantee == 8 * GiB);
  // 10 GiB: beyond its guarantee, and 2 GiB more than is free; the lender's idle 8 GiB cover it.
  CHECK(member->reserve(10 * GiB, std::nullopt).outcome == Outcome::lendable);
  const std::uint64_t started = monotonic_ns();
  CHECK(member->wait_and_reserve(10 * GiB, 3'000'000'000).outcome == Outcome::reserved);
  // The lender slept on its futex word (1 s timeout): only the wake can have answered this soon.
  CHECK(monotonic_ns() - started < 500'000'000);
  CHECK(member->terms().held == 10 * GiB);
  // More than anyone holds idle: refused at once, without a wait.
  const std::uint64_t again = monotonic_ns();
  CHECK(member->wait_and_reserve(8 * GiB, 1'000'000'000).outcome == Outcome::refused);
  CHECK(monotonic_ns() - again < 500'000'000);
}

TEST_CASE("ledger: a wait that no one answers ends in time", "[share][ledger]") {
  const std::string dir = temporary_dir();
  Neighbour holder(dir, 14 * GiB, 60000, /*deaf=*/true);
  std::string error;
  Member* member = join(request_in(dir), error);
  REQUIRE(member != nullptr);
  const std::uint64_t started = monotonic_ns();
  CHECK(member->wait_and_reserve(4 * GiB, 200'000'000).outcome == Outcome::refused);
  const std::uint64_t took = monotonic_ns() - started;
  CHECK(took >= 200'000'000);
  CHECK(took < 1'000'000'000);
  CHECK(member->figures().refusals_after_wait == 1);
}

// Holds a ledger's update lock from another open file description (as a busy or stopped member would)
// for `ms`, then lets it go.
class HeldUpdateLock {
 public:
  HeldUpdateLock(const std::string& path, int ms) : fd_(open(path.c_str(), O_RDWR | O_CLOEXEC)) {
    REQUIRE(fd_ >= 0);
    REQUIRE(set(F_WRLCK));
    release_ = std::thread([this, ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      set(F_UNLCK);
    });
  }
  ~HeldUpdateLock() {
    release_.join();
    close(fd_);
  }
  HeldUpdateLock(const HeldUpdateLock&) = delete;
  HeldUpdateLock& operator=(const HeldUpdateLock&) = delete;

 private:
  bool set(short type) const {
    struct flock lock {};
    lock.l_type = type;
    lock.l_whence = SEEK_SET;
    lock.l_start = kLedgerLockByte;
    lock.l_len = 1;
    return fcntl(fd_, F_OFD_SETLK, &lock) == 0;
  }
  int fd_;
  std::thread release_;
};

TEST_CASE("ledger: a short visit that finds the lock busy leaves the next ones their patience", "[share][ledger]") {
  const std::string dir = temporary_dir();
  std::string error;
  Member* member = join(request_in(dir), error);
  REQUIRE(member != nullptr);
  REQUIRE(member->reserve(GiB, std::nullopt).outcome == Outcome::reserved);
  member->answered(GiB);
  // Another open file description holds the update lock for 400 ms, as a busy member would.
  HeldUpdateLock busy(member->path(), 400);
  member->give_back(GiB / 2);  // waits 100 ms, in vain: kept for the next visit
  const std::uint64_t updates = member->figures().ledger_updates;
  // A busy lock is no stopped member: this visit waits for it (up to 2 s) instead of trying once.
  CHECK(member->reserve(GiB, std::nullopt).outcome == Outcome::reserved);
  CHECK(member->figures().ledger_updates == updates + 1);
  member->answered(GiB);
  CHECK(member->terms().held == GiB / 2 + GiB);  // the give-back kept aside was applied at that visit
}

TEST_CASE("ledger: a wait goes on past a look that could not lock the ledger", "[share][ledger]") {
  const std::string dir = temporary_dir();
  Neighbour borrower(dir, 14 * GiB, 10000);
  std::string error;
  Member* member = join(request_in(dir), error);
  REQUIRE(member != nullptr);
  // The update lock held for 2.3 s: longer than a visit's patience (2 s).
  HeldUpdateLock busy(member->path(), 2300);
  // Inside its guarantee (8 GiB): once the ledger is free again, the borrower is asked and gives back.
  const Reservation waited = member->wait_and_reserve(4 * GiB, 6'000'000'000);
  CHECK(waited.outcome == Outcome::reserved);
  CHECK(member->terms().held == 4 * GiB);
}

TEST_CASE("ledger: files it cannot trust are refused with one line", "[share][ledger]") {
  const std::string dir = temporary_dir();
  const JoinRequest request = request_in(dir);
  const std::string path = dir + "/" + ledger_file_name(request.uuid);
  std::string error;
  SECTION("another version") {
    LedgerHeader header{};
    initialise_header(header, request.device_total, request.uuid);
    header.version = 99;
    const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
    REQUIRE(pwrite(fd, &header, sizeof header, 0) == sizeof header);
    REQUIRE(ftruncate(fd, kLedgerFileBytes) == 0);
    close(fd);
    CHECK(join(request, error) == nullptr);
    CHECK_THAT(error, Catch::Contains("another gpumem version"));
  }
  SECTION("a symbolic link") {
    REQUIRE(symlink("/dev/null", path.c_str()) == 0);
    CHECK(join(request, error) == nullptr);
    CHECK_THAT(error, Catch::Contains("cannot be opened"));
  }
  SECTION("writable by others") {
    const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
    fchmod(fd, 0666);
    close(fd);
    CHECK(join(request, error) == nullptr);
    CHECK_THAT(error, Catch::Contains("writable by every user"));
  }
  SECTION("garbage") {
    const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
    REQUIRE(write(fd, "not a ledger at all, just text", 30) == 30);
    close(fd);
    CHECK(join(request, error) == nullptr);
    CHECK_THAT(error, Catch::Contains("not a gpumem ledger"));
  }
  CHECK(error.find('\n') == std::string::npos);
}

TEST_CASE("ledger: a forked child is not its parent's member", "[share][ledger]") {
  const std::string dir = temporary_dir();
  std::string error;
  Member* parent = join(request_in(dir), error);
  REQUIRE(parent != nullptr);
  REQUIRE(adopt(0, parent) == parent);
  REQUIRE(parent->reserve(2 * GiB, std::nullopt).outcome == Outcome::reserved);
  // Each child: dropped by the fork handler, it joins again beside the parent (whose slot its
  // closing the inherited descriptor did not release, nor its exit).
  for (int round = 0; round < 2; ++round) {
    const pid_t child = fork();
    if (child == 0) {
      if (member(0) != nullptr) _exit(3);
      Member* own = join(request_in(dir), error);
      _exit(own != nullptr && own->figures().members_at_join == 2 && own->terms().guarantee == 8 * GiB ? 0 : 4);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(parent->reserve(14 * GiB, std::nullopt).outcome == Outcome::reserved);
  // The children's slots are swept at the next refusal: the parent is alone again.
  CHECK(parent->reserve(1, std::nullopt).outcome == Outcome::refused);
  CHECK(parent->terms().guarantee == 16 * GiB);
}

TEST_CASE("member identity: container ids, escaped texts, how a member is named", "[share][identity]") {
  const std::string id(64, 'a');
  CHECK(container_id_in("/system.slice/docker-" + id + ".scope") == id);
  CHECK(container_id_in("/kubepods/burstable/pod0c1d2e3f-0000-4000-8000-000000000001/" + id) == id);
  CHECK(container_id_in("/kubepods.slice/cri-containerd-" + std::string(63, 'b') + ".scope").empty());
  CHECK(container_id_in("/process_api/1527b1745a8608d4e1f1129243f55b0a").empty());  // 32 digits: no container id
  CHECK(container_id_in("/x/" + std::string(65, 'c')).empty());
  char field[8] = {'a', '\x1b', '[', '"', '\\', '\xff', 'z', 'q'};  // no NUL: read to the field's end
  CHECK(identity_text(field) == "a\\x1b[\\x22\\x5c\\xffzq");

  LedgerSlot slot{};
  slot.pid = 1;
  slot.uid = 1000;
  slot.pid_namespace = 4026532174;
  slot.host_pid = 29535;
  std::memcpy(slot.comm, "share_hold", 10);
  MemberIdentity record{};
  std::memcpy(record.pod_name, "trainer-a", 9);
  std::memcpy(record.pod_namespace, "ml", 2);
  std::memcpy(record.host_name, "trainer-\x1b", 9);
  const std::string container = "0123456789ab" + std::string(52, 'f');
  std::memcpy(record.container_id, container.data(), 64);
  CHECK(describe_member(slot, &record, 4026531836, false) ==
        "pid 1 in pid namespace 4026532174 (host pid 29535) (share_hold; pod \"ml/trainer-a\", "
        "host \"trainer-\\x1b\", container 0123456789ab, uid 1000)");
  // In the reader's own pid namespace the pid needs no more; without a record, the slot's fields.
  CHECK(describe_member(slot, nullptr, 4026532174, true) == "pid 1 (share_hold, this process, uid 1000)");
  std::memset(record.container_id, 0, sizeof record.container_id);
  std::memcpy(record.cgroup, "/user.slice", 11);
  CHECK_THAT(describe_member(slot, &record, 4026532174, true),
             Catch::EndsWith("(share_hold, this process; pod \"ml/trainer-a\", host \"trainer-\\x1b\", "
                             "cgroup \"/user.slice\", uid 1000)"));
}

TEST_CASE("ledger: a member records who it is; a file without the identity table grows to hold it",
          "[share][identity]") {
  const std::string dir = temporary_dir();
  const JoinRequest request = request_in(dir);
  const std::string path = dir + "/" + ledger_file_name(request.uuid);
  SECTION("a file an older gpumem made") {  // format 1 without the table: 69,632 bytes, one member gone
    LedgerHeader header{};
    initialise_header(header, request.device_total, request.uuid);
    const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
    REQUIRE(pwrite(fd, &header, sizeof header, 0) == sizeof header);
    REQUIRE(ftruncate(fd, kLedgerFileBytes) == 0);
    close(fd);
  }
  SECTION("a new file") {}
  REQUIRE(setenv("POD_NAME", "trainer-a", 1) == 0);
  REQUIRE(setenv("POD_NAMESPACE", "ml", 1) == 0);
  std::string error;
  Member* member = join(request, error);
  unsetenv("POD_NAME");
  unsetenv("POD_NAMESPACE");
  INFO(error);
  REQUIRE(member != nullptr);
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK(static_cast<std::size_t>(st.st_size) == kLedgerFileWithIdentityBytes);
  const int fd = open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  void* map = mmap(nullptr, kLedgerFileWithIdentityBytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  REQUIRE(map != MAP_FAILED);
  const auto* slots = reinterpret_cast<const LedgerSlot*>(static_cast<const char*>(map) + kLedgerHeaderBytes);
  const auto* records = reinterpret_cast<const MemberIdentity*>(static_cast<const char*>(map) + kIdentityTableOffset);
  const LedgerSlot* own = nullptr;
  for (std::uint32_t i = 0; i < kLedgerSlots; ++i) {
    if (slots[i].state == kSlotLive && slots[i].pid == getpid()) own = &slots[i];
  }
  REQUIRE(own != nullptr);
  const MemberIdentity& record = records[own - slots];
  CHECK(own->identity_tag != 0);
  CHECK(record.tag == own->identity_tag);
  CHECK(own->pid_namespace == own_pid_namespace());
  CHECK(own->pid_namespace != 0);
  CHECK(identity_text(record.pod_name) == "trainer-a");
  CHECK(identity_text(record.pod_namespace) == "ml");
  char host[65] = {};
  REQUIRE(gethostname(host, 64) == 0);
  CHECK(identity_text(record.host_name) == host);
  CHECK_THAT(identity_text(record.command_line), Catch::Contains("test_share"));
  CHECK_THAT(member->holders(), Catch::Contains("pid " + std::to_string(getpid()) + " (") &&
                                    Catch::Contains("this process; pod \"ml/trainer-a\"") &&
                                    !Catch::Contains("pid namespace"));
  munmap(map, kLedgerFileWithIdentityBytes);
}

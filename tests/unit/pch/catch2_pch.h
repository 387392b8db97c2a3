// Catch2's single header and the standard headers the unit tests share, compiled once per test
// program as its precompiled header (builds configured with -Db_pch=true, as scripts/test's are
// without a compiler cache).
// No include guard: the compiler reads this file alone, as its own translation unit.

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

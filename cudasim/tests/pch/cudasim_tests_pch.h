// The headers the simulator's test programs share, compiled once per program as its precompiled
// header (builds configured with -Db_pch=true, as scripts/test's are without a compiler cache): they
// take about half of each test file's compile time.
// No include guard: the compiler reads this file alone, as its own translation unit.

#include <cuda.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

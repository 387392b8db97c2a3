// The standard and toolkit headers most of the driver's files include, compiled once per build
// (Meson's precompiled header, in builds configured with -Db_pch=true, as scripts/demo's is): that
// saves about a fifth of the simulated driver's compile time.
// No include guard: the compiler reads this file alone, as its own translation unit.

#include "../cuda_api.h"  // cuda.h as the driver sees it (every versioned name declared)

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

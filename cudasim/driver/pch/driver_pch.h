// The standard and toolkit headers most of the driver's files include, compiled once per build
// (Meson's precompiled header): parsing them was half of the simulator's compile time.
#pragma once

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

#include "config.h"
#include "shared_device.h"

#include "cudasim_private.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace cudasim {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<std::uint64_t> parse_count(std::string_view text) {
  text = trim(text);
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

void complain(const char* name, const char* value, const char* expected) {
  std::fprintf(stderr, "cudasim: %s=\"%s\" is malformed: expected %s\n", name, value, expected);
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
  text = trim(text);
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) return std::nullopt;
  auto number = parse_count(text.substr(0, digits));
  if (!number) return std::nullopt;
  std::string unit;
  for (char c : trim(text.substr(digits))) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K" || unit == "KB" || unit == "KIB") shift = 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") shift = 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") shift = 30;
  else if (unit == "T" || unit == "TB" || unit == "TIB") shift = 40;
  else return std::nullopt;
  if (shift > 0 && (*number >> (64 - shift)) != 0) return std::nullopt;  // overflow
  return *number << shift;
}

std::vector<int> visible_devices(const char* list, int count) {
  std::vector<int> visible;
  if (list == nullptr) {
    for (int i = 0; i < count; ++i) visible.push_back(i);
    return visible;
  }
  std::string_view rest = list;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view entry = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    int found = -1;
    if (auto index = parse_count(entry)) {
      if (*index < static_cast<std::uint64_t>(count)) found = static_cast<int>(*index);
    } else if (!entry.empty()) {
      // A UUID or the start of one, with or without "GPU-": it must name exactly one device.
      const bool prefixed = entry.substr(0, 4) == "GPU-";
      for (int i = 0; i < count; ++i) {
        char text[41];
        cudasim_device_uuid_text(i, text);
        const std::string_view uuid = prefixed ? std::string_view(text) : std::string_view(text).substr(4);
        if (uuid.substr(0, entry.size()) != entry) continue;
        if (found >= 0) {  // ambiguous
          found = -1;
          break;
        }
        found = i;
      }
    }
    if (found < 0 || std::find(visible.begin(), visible.end(), found) != visible.end()) break;
    visible.push_back(found);
  }
  return visible;
}

std::optional<int> parse_driver_version(std::string_view text) {
  auto n = parse_count(text);
  if (!n || *n < static_cast<std::uint64_t>(kOldestDriverVersion) ||
      *n > static_cast<std::uint64_t>(kDefaultDriverVersion) || *n % 10 != 0)
    return std::nullopt;
  return static_cast<int>(*n);
}

Config read_config() {
  Config config;
  bool devices_given = false;
  if (const char* v = std::getenv("CUDASIM_DEVICES")) {
    auto n = parse_count(v);
    if (!n || *n < 1 || *n > 64) {
      complain("CUDASIM_DEVICES", v, "a device count from 1 to 64");
      config.valid = false;
    } else {
      config.device_count = static_cast<int>(*n);
      devices_given = true;
    }
  }
  std::vector<std::uint64_t> sizes;
  if (const char* v = std::getenv("CUDASIM_DEVICE_MEMORY")) {
    std::string_view rest = v;
    bool ok = true;
    while (ok) {
      auto comma = rest.find(',');
      auto size = parse_size(rest.substr(0, comma));
      if (!size || *size == 0) ok = false;
      else sizes.push_back(*size);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (ok && sizes.size() > 1 && devices_given &&
        sizes.size() != static_cast<std::size_t>(config.device_count)) {
      ok = false;
    }
    if (!ok) {
      complain("CUDASIM_DEVICE_MEMORY", v,
               "a size > 0 such as 16G or 512MiB, or a comma list with one size per device");
      config.valid = false;
      sizes.clear();
    } else if (sizes.size() > 1 && !devices_given) {
      config.device_count = static_cast<int>(sizes.size());
    }
  }
  if (sizes.empty()) sizes.push_back(16ull << 30);
  config.device_memory.assign(static_cast<std::size_t>(config.device_count), sizes.front());
  if (sizes.size() > 1) config.device_memory = sizes;

  auto read_size = [&](const char* name, std::uint64_t& out) {
    if (const char* v = std::getenv(name)) {
      if (auto size = parse_size(v)) out = *size;
      else { complain(name, v, "a size such as 300M or 0"); config.valid = false; }
    }
  };
  auto read_count = [&](const char* name, std::uint64_t& out) {
    if (const char* v = std::getenv(name)) {
      if (auto n = parse_count(v)) out = *n;
      else { complain(name, v, "a non-negative integer"); config.valid = false; }
    }
  };
  read_size("CUDASIM_CONTEXT_OVERHEAD", config.context_overhead);
  read_count("CUDASIM_ALLOC_LATENCY_US", config.alloc_latency_us);
  read_count("CUDASIM_FREE_LATENCY_US", config.free_latency_us);
  if (const char* v = std::getenv("CUDASIM_LATENCY")) {
    std::string error;
    if (const std::optional<DriverLatency> latency = parse_driver_latency(v, error)) {
      config.latency = *latency;
    } else {
      std::fprintf(stderr, "cudasim: CUDASIM_LATENCY: %s\n", error.c_str());
      config.valid = false;
    }
  }
  if (std::getenv("CUDASIM_FAIL_ALLOC_AFTER")) {
    std::uint64_t n = 0;
    read_count("CUDASIM_FAIL_ALLOC_AFTER", n);
    if (config.valid) config.fail_alloc_after = n;
  }
  if (const char* v = std::getenv("CUDASIM_DRIVER_VERSION")) {
    if (auto version = parse_driver_version(v)) config.driver_version = *version;
    else {
      complain("CUDASIM_DRIVER_VERSION", v, "a CUDA version from 12000 to 13000 in steps of 10, such as 12080");
      config.valid = false;
    }
  }
  if (const char* v = std::getenv("CUDASIM_KERNELS")) {
    const std::string_view value(v);
    if (value == "fail") config.kernels = KernelLaunches::Fail;
    else if (value == "skip") config.kernels = KernelLaunches::Skip;
    else {
      complain("CUDASIM_KERNELS", v, "skip (launches complete without running device code) or fail");
      config.valid = false;
    }
  }
  if (const char* v = std::getenv("CUDASIM_PEER_ACCESS")) {
    const std::string_view value(v);
    if (value == "all") config.peer_access = true;
    else if (value == "none") config.peer_access = false;
    else {
      complain("CUDASIM_PEER_ACCESS", v, "all (every pair of devices can access each other) or none");
      config.valid = false;
    }
  }
  if (const char* v = std::getenv("CUDASIM_VMM")) {
    const std::string_view value(v);
    if (value == "all") {
      config.vmm_devices = ~std::uint64_t{0};
    } else if (value == "none") {
      config.vmm_devices = 0;
    } else {  // the device numbers that support it, comma-separated
      config.vmm_devices = 0;
      for (std::size_t at = 0; at <= value.size();) {
        const std::size_t comma = std::min(value.find(',', at), value.size());
        const auto n = parse_count(value.substr(at, comma - at));
        if (!n || *n >= static_cast<std::uint64_t>(config.device_count)) {
          complain("CUDASIM_VMM", v, "all, none, or the device numbers that support virtual memory management (0,2)");
          config.valid = false;
          break;
        }
        config.vmm_devices |= std::uint64_t{1} << *n;
        at = comma + 1;
      }
    }
  }
  if (const char* v = std::getenv("CUDA_DEVICE_ORDER")) {
    // The simulated devices are equally fast, so FASTEST_FIRST (the default) ties everywhere and
    // enumerates them as PCI_BUS_ID does: by device number. The driver ignores other values.
    const std::string_view value(v);
    if (value != "FASTEST_FIRST" && value != "PCI_BUS_ID")
      std::fprintf(stderr, "cudasim: CUDA_DEVICE_ORDER=\"%s\" is neither FASTEST_FIRST nor PCI_BUS_ID; ignored\n", v);
  }
  config.visible = visible_devices(std::getenv("CUDA_VISIBLE_DEVICES"), config.device_count);
  if (const char* v = std::getenv("CUDASIM_REPORT")) config.report_path = v;
  if (const char* v = std::getenv("CUDASIM_SHARED_DEVICES")) {
    const std::string_view value = trim(v);
    if (value == "1") config.shared_devices_dir = default_shared_devices_dir();
    else if (!value.empty() && value.front() == '/') config.shared_devices_dir = std::string(value);
    else if (!value.empty() && value != "0") {
      complain("CUDASIM_SHARED_DEVICES", v, "0, 1 (the default directory) or an absolute directory path");
      config.valid = false;
    }
  }
  return config;
}

}  // namespace cudasim

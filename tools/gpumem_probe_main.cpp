// gpumem-probe: what gpumem would do in a process started with this environment, without running a
// program (gpumem-run --check runs it). Reads the policy exactly as the shim does, loads the CUDA
// driver the way a program would (libcuda.so.1 on the library path: NVIDIA's, or gpumem's simulated
// one under --sim) and asks it for its devices, then prints, per device, the limit gpumem would set
// and how it would serve memory. Creates no context unless GPUMEM_FRACTION_OF=free needs the free
// memory; allocates nothing.
//
// Exit status: 0 when the configuration is valid, 1 when a variable is invalid (each said in its own
// line, as the shim says it), 2 for a bad command line.
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "policy/policy.h"
#include "policy/value_parsers.h"

namespace {

constexpr int kMaxDevices = 64;  // the shim's budgets cover as many

std::optional<std::string_view> read_environment(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr) return std::nullopt;
  return std::string_view(value);
}

// The driver's entry points the probe calls, looked up by name as a program's runtime does.
struct Driver {
  void* handle = nullptr;
  std::string path;
  decltype(&cuInit) init = nullptr;
  decltype(&cuDriverGetVersion) version = nullptr;
  decltype(&cuDeviceGetCount) count = nullptr;
  decltype(&cuDeviceGet) get = nullptr;
  decltype(&cuDeviceGetName) name = nullptr;
  decltype(&cuDeviceTotalMem_v2) total = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
  decltype(&cuDeviceGetUuid_v2) uuid = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&cuDevicePrimaryCtxRelease_v2) release = nullptr;
  decltype(&cuCtxSetCurrent) set_current = nullptr;
  decltype(&cuMemGetInfo_v2) mem_info = nullptr;
};

template <typename Function>
void resolve(void* handle, const char* name, Function& out) {
  out = reinterpret_cast<Function>(dlsym(handle, name));
}

std::optional<Driver> load_driver(std::string& why) {
  Driver driver;
  driver.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver.handle == nullptr) {
    const char* error = dlerror();
    why = error != nullptr ? error : "libcuda.so.1 not found";
    return std::nullopt;
  }
  link_map* map = nullptr;
  if (dlinfo(driver.handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
    driver.path = map->l_name;
  }
  resolve(driver.handle, "cuInit", driver.init);
  resolve(driver.handle, "cuDriverGetVersion", driver.version);
  resolve(driver.handle, "cuDeviceGetCount", driver.count);
  resolve(driver.handle, "cuDeviceGet", driver.get);
  resolve(driver.handle, "cuDeviceGetName", driver.name);
  resolve(driver.handle, "cuDeviceTotalMem_v2", driver.total);
  resolve(driver.handle, "cuDeviceGetAttribute", driver.attribute);
  resolve(driver.handle, "cuDeviceGetUuid_v2", driver.uuid);
  resolve(driver.handle, "cuDevicePrimaryCtxRetain", driver.retain);
  resolve(driver.handle, "cuDevicePrimaryCtxRelease_v2", driver.release);
  resolve(driver.handle, "cuCtxSetCurrent", driver.set_current);
  resolve(driver.handle, "cuMemGetInfo_v2", driver.mem_info);
  if (driver.init == nullptr || driver.count == nullptr || driver.get == nullptr || driver.total == nullptr) {
    why = fmt::format("{} lacks cuInit, cuDeviceGetCount, cuDeviceGet or cuDeviceTotalMem_v2",
                      driver.path.empty() ? "libcuda.so.1" : driver.path);
    return std::nullopt;
  }
  return driver;
}

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  std::size_t total = 0;
  std::optional<std::size_t> free;
  bool vmm = false;
  gpumem::GpuId id{};
};

std::vector<DeviceInfo> query_devices(const Driver& driver, int count, bool want_free) {
  std::vector<DeviceInfo> devices;
  for (int ordinal = 0; ordinal < count && ordinal < kMaxDevices; ++ordinal) {
    DeviceInfo info;
    info.ordinal = ordinal;
    CUdevice device = 0;
    if (driver.get(&device, ordinal) != CUDA_SUCCESS) continue;
    char name[256] = {};
    if (driver.name != nullptr && driver.name(name, sizeof name - 1, device) == CUDA_SUCCESS) info.name = name;
    if (driver.total(&info.total, device) != CUDA_SUCCESS) info.total = 0;
    int supported = 0;
    info.vmm = driver.attribute != nullptr &&
               driver.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) ==
                   CUDA_SUCCESS &&
               supported != 0;
    CUuuid uuid{};
    if (driver.uuid != nullptr && driver.uuid(&uuid, device) == CUDA_SUCCESS) {
      for (std::size_t i = 0; i < info.id.size(); ++i) info.id[i] = static_cast<std::uint8_t>(uuid.bytes[i]);
    } else {
      info.id.fill(0xff);
      info.id[0] = static_cast<std::uint8_t>(ordinal);
    }
    CUcontext context = nullptr;
    if (want_free && driver.retain != nullptr && driver.release != nullptr && driver.set_current != nullptr &&
        driver.mem_info != nullptr && driver.retain(&context, device) == CUDA_SUCCESS) {
      std::size_t free = 0;
      std::size_t total = 0;
      if (driver.set_current(context) == CUDA_SUCCESS && driver.mem_info(&free, &total) == CUDA_SUCCESS) info.free = free;
      driver.set_current(nullptr);
      driver.release(device);
    }
    devices.push_back(info);
  }
  return devices;
}

// How a bfc arena would take its memory on a device (the shim decides in managers/bfc_manager.cpp).
std::string bfc_serving(const gpumem::Policy& policy, const DeviceInfo& device) {
  using gpumem::RegionSourceChoice;
  const std::string preallocation = policy.preallocate ? "preallocated at the first allocation" : "growing on demand";
  std::string regions;
  if (policy.region_source == RegionSourceChoice::classic) {
    regions = "classic regions (GPUMEM_REGION_SOURCE)";
  } else if (device.vmm) {
    regions = policy.region_source == RegionSourceChoice::automatic ? "vmm regions (auto)" : "vmm regions";
  } else {
    regions = policy.region_source == RegionSourceChoice::automatic
                  ? "classic regions (auto: the driver has no virtual memory management)"
                  : "classic regions (vmm asked for, but the driver has no virtual memory management)";
  }
  return fmt::format("bfc arena, {}, {}", preallocation, regions);
}

std::string serving(const gpumem::Policy& policy, const DeviceInfo& device) {
  switch (policy.mode) {
    case gpumem::Mode::bfc: return bfc_serving(policy, device);
    case gpumem::Mode::cuda_async: return "cuda_async pool";
    case gpumem::Mode::platform: return "platform, every request to the driver";
    case gpumem::Mode::off: break;
  }
  return "passed through";
}

constexpr std::string_view kHelp =
    "Usage: gpumem-probe\n"
    "\n"
    "Says what gpumem would do in a process started with this environment, without running one: the\n"
    "CUDA driver found (libcuda.so.1 on the library path), its devices, and per device the limit gpumem\n"
    "would set and how it would serve memory; each invalid variable in one line. gpumem-run --check runs\n"
    "it with gpumem-run's options applied. Exit status 0: valid configuration; 1: a variable is invalid.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    const std::string_view argument = argv[1];
    if (argument == "-h" || argument == "--help") {
      std::fputs(kHelp.data(), stdout);
      return 0;
    }
    std::fprintf(stderr, "gpumem-probe: unexpected argument %s (it takes none; see --help)\n",
                 gpumem::quote_value(argument).c_str());
    return 2;
  }

  const gpumem::PolicyResult result = gpumem::policy_from_environment(read_environment);
  const gpumem::Policy& policy = *result.policy;

  std::string why;
  const std::optional<Driver> driver = load_driver(why);
  int count = 0;
  std::vector<DeviceInfo> devices;
  if (!driver) {
    fmt::print("driver:   none found ({}): a CUDA program here fails at its first call, and gpumem with it; "
               "without a GPU, gpumem-run --sim runs over the simulated one\n",
               why);
  } else {
    int version = 0;
    if (driver->version == nullptr || driver->version(&version) != CUDA_SUCCESS) version = 0;
    const CUresult initialised = driver->init(0);
    if (initialised == CUDA_SUCCESS && driver->count(&count) != CUDA_SUCCESS) count = 0;
    devices = query_devices(*driver, initialised == CUDA_SUCCESS ? count : 0,
                            policy.mode != gpumem::Mode::off && policy.fraction_of == gpumem::FractionBasis::free);
    const bool simulated = !devices.empty() && devices.front().name.starts_with("Simulated CUDA Device");
    fmt::print("driver:   {}{}, CUDA {}.{}\n", driver->path.empty() ? "libcuda.so.1" : driver->path,
               simulated ? " (gpumem's simulated driver: no GPU is used)" : "", version / 1000, version % 1000 / 10);
    if (initialised != CUDA_SUCCESS) {
      fmt::print("devices:  none: cuInit failed with error {}\n", static_cast<int>(initialised));
    } else {
      fmt::print("devices:  {}\n", count);
    }
  }

  std::vector<gpumem::GpuId> visible;
  for (const DeviceInfo& device : devices) visible.push_back(device.id);
  for (const DeviceInfo& device : devices) {
    fmt::print("  device {}: {}, {} ({} bytes)\n", device.ordinal, device.name.empty() ? "?" : device.name,
               gpumem::human_byte_size(device.total), device.total);
    if (result.refuses() || policy.mode == gpumem::Mode::off) continue;
    const gpumem::DeviceView view{device.ordinal, device.total, device.free.value_or(device.total),
                                  policy.ranks_sharing_gpu(visible, static_cast<std::size_t>(device.ordinal))};
    const gpumem::DeviceLimit limit = policy.device_limit(view);
    if (limit.bytes == 0) {
      fmt::print("    not managed: {}\n", policy.limit_below_granule_error(view));
      continue;
    }
    if (policy.share) {
      fmt::print("    {}, limit: the share of the GPU its ledger gives (GPUMEM_SHARE=auto), at most {}\n",
                 serving(policy, device), gpumem::human_byte_size(limit.cap == 0 ? device.total : limit.cap));
    } else {
      fmt::print("    {}, limit {} ({}){}\n", serving(policy, device), gpumem::human_byte_size(limit.bytes),
                 limit.summary,
                 policy.fraction_of == gpumem::FractionBasis::free ? "; free memory is read again at the first allocation"
                                                                   : "");
    }
    // The derivation without its "device N: limit B bytes: " head, which the line above says.
    const std::size_t head = limit.derivation.find(" bytes: ");
    fmt::print("    from: {}\n", head == std::string::npos ? limit.derivation : limit.derivation.substr(head + 8));
  }
  if (driver && !devices.empty()) {
    for (const std::string& line : policy.limits_for_missing_devices(static_cast<int>(devices.size()))) {
      fmt::print("  warning: {}\n", line);
    }
  }

  if (result.refuses()) {
    fmt::print("gpumem:   refuses the program: GPUMEM_STRICT is set and {} variable{} invalid; every CUDA call "
               "would fail with CUDA_ERROR_NOT_INITIALIZED\n",
               result.errors.size(), result.errors.size() == 1 ? " is" : "s are");
  } else if (policy.mode == gpumem::Mode::off) {
    fmt::print("gpumem:   passes every call through ({}=off)\n", policy.mode_origin.variable);
  } else {
    fmt::print("gpumem:   would take over each device at a program's first allocation there; the program then reads "
               "the limit as the device's memory\n");
  }
  fmt::print("policy:   {}\n", policy.describe());
  if (result.errors.empty()) {
    fmt::print("errors:   none\n");
  } else {
    fmt::print("errors:   {}\n", result.errors.size());
    for (const gpumem::PolicyError& error : result.errors) fmt::print("  {}\n", error.line);
  }
  std::fflush(stdout);
  return result.errors.empty() ? 0 : 1;
}

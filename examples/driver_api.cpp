// driver_api: the alloc_churn workload through the driver API (cuMemAlloc/cuMemFree and friends)
// on the device's primary context, as libraries that bypass the runtime do.
//
//   driver_api [SCALE]   runs SCALE x 4000 steps (default 1)
#include "churn.h"
#include "driver_check.h"

namespace {

struct DriverMemory {
  std::uint64_t allocate(std::size_t size) {
    CUdeviceptr address = 0;
    CU_CHECK(cuMemAlloc(&address, size));
    return address;
  }
  void release(std::uint64_t address) { CU_CHECK(cuMemFree(static_cast<CUdeviceptr>(address))); }
  void upload(std::uint64_t address, const void* data, std::size_t size) {
    CU_CHECK(cuMemcpyHtoD(static_cast<CUdeviceptr>(address), data, size));
  }
  void download(void* data, std::uint64_t address, std::size_t size) {
    CU_CHECK(cuMemcpyDtoH(data, static_cast<CUdeviceptr>(address), size));
  }
};

}  // namespace

int main(int argc, char** argv) {
  examples::ChurnConfig config;
  config.steps *= examples::parse_argument(argc, argv, 1, "SCALE");

  CU_CHECK(cuInit(0));
  CUdevice device = 0;
  CU_CHECK(cuDeviceGet(&device, 0));
  CUcontext context = nullptr;
  CU_CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CU_CHECK(cuCtxSetCurrent(context));

  DriverMemory memory;
  const examples::ChurnResult result = examples::run_churn(memory, config);

  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  CU_CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
  CU_CHECK(cuCtxSetCurrent(nullptr));
  CU_CHECK(cuDevicePrimaryCtxRelease(device));

  examples::print_churn_summary("driver_api", "cuMemAlloc/cuMemFree", config, result);
  std::printf("  cuMemGetInfo afterwards: free %s of %s\n", examples::format_bytes(free_bytes).c_str(),
              examples::format_bytes(total_bytes).c_str());
  result.checksum.print();
  return 0;
}

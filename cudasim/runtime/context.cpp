#include "context.h"

#include <pthread.h>

#include <array>
#include <atomic>

#include "driver_table.h"
#include "error_state.h"

namespace cudasim::runtime {

// symbol_api.cpp's (operations.h), referenced weakly: a program that registers no variable, such
// as a C program linked to the static archive, then pulls in neither it nor the C++ library it uses.
void forget_symbol_storage(CUcontext context) __attribute__((weak));

namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kRetiredPerDevice = 8;

// Invariant: `retained` is true exactly while this runtime holds one retain on the device's
// primary context `handle`; `retired` holds the latest handles reset since (a thread may still
// have one current, and must not go on using it as if it were an application context).
struct PrimaryContext {
  CUcontext handle = nullptr;
  bool retained = false;
  std::array<CUcontext, kRetiredPerDevice> retired{};
  size_t next_retired = 0;

  bool was_retired(CUcontext context) const {
    for (CUcontext old : retired) {
      if (old != nullptr && old == context) return true;
    }
    return false;
  }
  void forget_retired(CUcontext context) {
    for (CUcontext& old : retired) {
      if (old == context) old = nullptr;
    }
  }
  void retire() {
    retired[next_retired] = handle;
    next_retired = (next_retired + 1) % kRetiredPerDevice;
  }
};

// Plain pthread types, constant-initialised: no constructor, destructor or libstdc++ dependency.
// Invariant: `devices` is only read or written with `mutex` held.
struct PrimaryContexts {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  std::array<PrimaryContext, kMaxDevices> devices{};
};
constinit PrimaryContexts primary_contexts{};

PrimaryContexts& primaries() { return primary_contexts; }

class Locked {
 public:
  explicit Locked(pthread_mutex_t& mutex) : mutex_(mutex) { pthread_mutex_lock(&mutex_); }
  ~Locked() { pthread_mutex_unlock(&mutex_); }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  pthread_mutex_t& mutex_;
};

// The device the thread selected with cudaSetDevice, or -1 (the default device) when it never did.
thread_local int selected_device = -1;
// The device a thread that selected none works on: the first of cudaSetValidDevices' list (every
// simulated device works), else 0.
constinit std::atomic<int> default_device{0};

int thread_device() { return selected_device < 0 ? default_device.load() : selected_device; }

// Whether `context` is a primary context this runtime has reset and not yet retained again.
bool is_retired(CUcontext context) {
  PrimaryContexts& all = primaries();
  Locked lock(all.mutex);
  for (const PrimaryContext& device : all.devices) {
    if (device.retained && device.handle == context) return false;
    if (device.was_retired(context)) return true;
  }
  return false;
}

// The thread's current context when it is one the runtime may use, else nullptr.
cudaError_t usable_current_context(CUcontext* context) {
  *context = nullptr;
  CUcontext current = nullptr;
  const cudaError_t status = call_driver<&DriverTable::cuCtxGetCurrent>(&current);
  if (status != cudaSuccess) return status;
  if (current != nullptr && !is_retired(current)) *context = current;
  return cudaSuccess;
}

// Retains the device's primary context once per process and makes it current on this thread.
cudaError_t activate_primary_context(int device) {
  CUcontext context = nullptr;
  const cudaError_t status = primary_context(device, &context);
  if (status != cudaSuccess) return status;
  return call_driver<&DriverTable::cuCtxSetCurrent>(context);
}

}  // namespace

cudaError_t primary_context(int device, CUcontext* context) {
  CUdevice handle = 0;
  cudaError_t status = device_handle(device, &handle);
  if (status != cudaSuccess) return status;
  {
    PrimaryContexts& all = primaries();
    Locked lock(all.mutex);
    PrimaryContext& primary = all.devices[static_cast<size_t>(device)];
    if (!primary.retained) {
      CUcontext retained = nullptr;
      status = call_driver<&DriverTable::cuDevicePrimaryCtxRetain>(&retained, handle);
      if (status != cudaSuccess) return status;
      primary.forget_retired(retained);
      primary.handle = retained;
      primary.retained = true;
    }
    *context = primary.handle;
  }
  return cudaSuccess;
}

cudaError_t device_count(int* count) {
  const cudaError_t status = driver_status();
  if (status != cudaSuccess) return status;
  return call_driver<&DriverTable::cuDeviceGetCount>(count);
}

cudaError_t device_handle(int device, CUdevice* handle) {
  int count = 0;
  const cudaError_t status = device_count(&count);
  if (status != cudaSuccess) return status;
  if (device < 0 || device >= count || device >= kMaxDevices) return cudaErrorInvalidDevice;
  return call_driver<&DriverTable::cuDeviceGet>(handle, device);
}

cudaError_t ensure_context() {
  cudaError_t status = driver_status();
  if (status != cudaSuccess) return status;
  if (const cudaError_t sticky = sticky_error(); sticky != cudaSuccess) return sticky;
  CUcontext current = nullptr;
  status = usable_current_context(&current);
  if (status != cudaSuccess || current != nullptr) return status;
  return activate_primary_context(thread_device());
}

cudaError_t current_device(int* device) {
  cudaError_t status = driver_status();
  if (status != cudaSuccess) return status;
  CUcontext current = nullptr;
  status = usable_current_context(&current);
  if (status != cudaSuccess) return status;
  if (current == nullptr) {
    *device = thread_device();
    return cudaSuccess;
  }
  CUdevice handle = 0;
  status = call_driver<&DriverTable::cuCtxGetDevice>(&handle, nullptr);  // the current context's
  if (status != cudaSuccess) return status;
  int count = 0;
  status = device_count(&count);
  if (status != cudaSuccess) return status;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice candidate = 0;
    if (call_driver<&DriverTable::cuDeviceGet>(&candidate, ordinal) == cudaSuccess &&
        candidate == handle) {
      *device = ordinal;
      return cudaSuccess;
    }
  }
  return cudaErrorInvalidDevice;
}

cudaError_t set_valid_devices(const int* devices, int count) {
  int available = 0;
  if (cudaError_t status = device_count(&available); status != cudaSuccess) return status;
  if (count < 0 || count > available || (count > 0 && devices == nullptr)) return cudaErrorInvalidValue;
  for (int i = 0; i < count; ++i) {
    CUdevice handle = 0;
    if (cudaError_t status = device_handle(devices[i], &handle); status != cudaSuccess) return status;
  }
  default_device.store(count > 0 ? devices[0] : 0);
  return cudaSuccess;
}

cudaError_t select_device(int device) {
  CUdevice handle = 0;
  const cudaError_t status = device_handle(device, &handle);
  if (status != cudaSuccess) return status;
  selected_device = device;
  return activate_primary_context(device);
}

cudaError_t reset_current_device() {
  int device = 0;
  cudaError_t status = current_device(&device);
  if (status != cudaSuccess) return status;
  CUdevice handle = 0;
  status = device_handle(device, &handle);
  if (status != cudaSuccess) return status;
  CUcontext reset = nullptr;
  {
    PrimaryContexts& all = primaries();
    Locked lock(all.mutex);
    PrimaryContext& primary = all.devices[static_cast<size_t>(device)];
    status = call_driver<&DriverTable::cuDevicePrimaryCtxReset>(handle);
    if (status != cudaSuccess) return status;
    if (primary.retained) primary.retire();
    primary.retained = false;
    reset = primary.handle;
  }
  if (forget_symbol_storage != nullptr) forget_symbol_storage(reset);  // their memory went with the context
  clear_sticky_error();
  // The reset context must not stay current here: the next call creates the primary context anew.
  CUcontext current = nullptr;
  if (call_driver<&DriverTable::cuCtxGetCurrent>(&current) == cudaSuccess && is_retired(current))
    call_driver<&DriverTable::cuCtxSetCurrent>(nullptr);
  return cudaSuccess;
}

}  // namespace cudasim::runtime

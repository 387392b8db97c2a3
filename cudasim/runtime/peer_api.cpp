// Peer access between devices: cudaDeviceCanAccessPeer, cudaDeviceGetP2PAttribute and
// cudaDeviceEnablePeerAccess / cudaDeviceDisablePeerAccess, which enable access from the current
// device's context to the peer device's primary context.
#include "context.h"
#include "driver_table.h"
#include "entry_point.h"

namespace cudasim::runtime {
namespace {

// The peer device's primary context, retained for as long as the runtime holds that device's.
cudaError_t peer_context(int peer_device, CUcontext* context) {
  CUdevice handle = 0;
  if (const cudaError_t status = device_handle(peer_device, &handle); status != cudaSuccess) return status;
  return primary_context(peer_device, context);
}

cudaError_t change_peer_access(int peer_device, unsigned flags, bool enable) {
  if (enable && flags != 0) return cudaErrorInvalidValue;
  return with_context([&] {
    CUcontext peer = nullptr;
    if (const cudaError_t status = peer_context(peer_device, &peer); status != cudaSuccess) return status;
    int device = -1;
    if (const cudaError_t status = current_device(&device); status != cudaSuccess) return status;
    // A device is not its own peer (cudaDeviceCanAccessPeer says 0): cudaErrorInvalidDevice, as the
    // runtime documents, where the driver would report the context itself as invalid.
    if (enable && peer_device == device) return cudaErrorInvalidDevice;
    return enable ? call_driver<&DriverTable::cuCtxEnablePeerAccess>(peer, flags)
                  : call_driver<&DriverTable::cuCtxDisablePeerAccess>(peer);
  });
}

// A copy between two devices' memory: the driver's peer copy between their primary contexts.
cudaError_t peer_copy(void* dst, int dst_device, const void* src, int src_device, size_t count, CUstream stream,
                      bool async) {
  return with_context([&] {
    CUcontext dst_ctx = nullptr, src_ctx = nullptr;
    if (const cudaError_t status = peer_context(dst_device, &dst_ctx); status != cudaSuccess) return status;
    if (const cudaError_t status = peer_context(src_device, &src_ctx); status != cudaSuccess) return status;
    const auto to = reinterpret_cast<CUdeviceptr>(dst);
    const auto from = reinterpret_cast<CUdeviceptr>(src);
    return async ? call_driver<&DriverTable::cuMemcpyPeerAsync>(to, dst_ctx, from, src_ctx, count, stream)
                 : call_driver<&DriverTable::cuMemcpyPeer>(to, dst_ctx, from, src_ctx, count);
  });
}

}  // namespace
}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  return api_call([&] {
    CUdevice handle = 0;
    CUdevice peer = 0;
    if (const cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
    if (const cudaError_t status = device_handle(peerDevice, &peer); status != cudaSuccess) return status;
    if (canAccessPeer == nullptr) return cudaErrorInvalidValue;
    return call_driver<&DriverTable::cuDeviceCanAccessPeer>(canAccessPeer, handle, peer);
  });
}

cudaError_t cudaDeviceGetP2PAttribute(int* value, enum cudaDeviceP2PAttr attr, int srcDevice, int dstDevice) {
  return api_call([&] {
    CUdevice source = 0;
    CUdevice destination = 0;
    if (const cudaError_t status = device_handle(srcDevice, &source); status != cudaSuccess) return status;
    if (const cudaError_t status = device_handle(dstDevice, &destination); status != cudaSuccess) return status;
    if (value == nullptr) return cudaErrorInvalidValue;
    return call_driver<&DriverTable::cuDeviceGetP2PAttribute>(value, static_cast<CUdevice_P2PAttribute>(attr),
                                                              source, destination);
  });
}

// cudaAtomicOperation and CUatomicOperation share their values, as do the capability bits.
cudaError_t cudaDeviceGetP2PAtomicCapabilities(unsigned int* capabilities, const enum cudaAtomicOperation* operations,
                                               unsigned int count, int srcDevice, int dstDevice) {
  return api_call([&] {
    CUdevice source = 0;
    CUdevice destination = 0;
    if (const cudaError_t status = device_handle(srcDevice, &source); status != cudaSuccess) return status;
    if (const cudaError_t status = device_handle(dstDevice, &destination); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuDeviceGetP2PAtomicCapabilities>(
        capabilities, reinterpret_cast<const CUatomicOperation*>(operations), count, source, destination);
  });
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  return api_call([&] { return change_peer_access(peerDevice, flags, true); });
}
cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  return api_call([&] { return change_peer_access(peerDevice, 0, false); });
}

cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  return api_call([&] { return peer_copy(dst, dstDevice, src, srcDevice, count, nullptr, false); });
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                cudaStream_t stream) {
  return api_call([&] { return peer_copy(dst, dstDevice, src, srcDevice, count, stream, true); });
}

}  // extern "C"

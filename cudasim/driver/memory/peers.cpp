// Peer access between devices. Every pair of distinct simulated devices can access each other
// (as on an NVLink or PCIe-switch machine) unless CUDASIM_PEER_ACCESS=none; a device is never its
// own peer. Access is enabled per ordered pair of contexts and ends with either context.
#include "contexts.h"
#include "state.h"

using namespace cudasim;

namespace {

bool can_access_peer(const State& st, int device, int peer) { return devices_are_peers(st.config, device, peer); }

}  // namespace

namespace cudasim {

void forget_context_peers(State& st, CUctx_st* ctx) {
  std::erase_if(st.peer_access, [ctx](const auto& pair) { return pair.first == ctx || pair.second == ctx; });
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  if (!valid_device(l.st, peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *canAccessPeer = can_access_peer(l.st, dev, peerDev) ? 1 : 0;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                                CUdevice dstDevice) {
  Locked l;
  if (CUresult rc = device_status(l, srcDevice); rc != CUDA_SUCCESS) return rc;
  if (!valid_device(l.st, dstDevice) || srcDevice == dstDevice) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool access = can_access_peer(l.st, srcDevice, dstDevice);
  switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 0; return CUDA_SUCCESS;  // one link kind only
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = access ? 1 : 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

namespace {

// The operations a peer link carries natively, as on an NVLink-connected sm_90 pair: every
// integer operation on 32 and 64 bits (increment and decrement only unsigned 32-bit, as
// atomicInc/atomicDec), exchange and compare-and-swap up to 128 bits, float addition on scalars
// and four-float vectors. Float minimum and maximum are not native (a compare-and-swap loop).
unsigned peer_atomic_capabilities(CUatomicOperation operation) {
  constexpr unsigned kIntegers = CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED |
                                 CU_ATOMIC_CAPABILITY_REDUCTION | CU_ATOMIC_CAPABILITY_SCALAR_32 |
                                 CU_ATOMIC_CAPABILITY_SCALAR_64;
  switch (operation) {
    case CU_ATOMIC_OPERATION_INTEGER_INCREMENT:
    case CU_ATOMIC_OPERATION_INTEGER_DECREMENT:
      return CU_ATOMIC_CAPABILITY_UNSIGNED | CU_ATOMIC_CAPABILITY_REDUCTION | CU_ATOMIC_CAPABILITY_SCALAR_32;
    case CU_ATOMIC_OPERATION_EXCHANGE:
    case CU_ATOMIC_OPERATION_CAS:
      return CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED | CU_ATOMIC_CAPABILITY_SCALAR_32 |
             CU_ATOMIC_CAPABILITY_SCALAR_64 | CU_ATOMIC_CAPABILITY_SCALAR_128;
    case CU_ATOMIC_OPERATION_FLOAT_ADD:
      return CU_ATOMIC_CAPABILITY_REDUCTION | CU_ATOMIC_CAPABILITY_SCALAR_32 | CU_ATOMIC_CAPABILITY_SCALAR_64 |
             CU_ATOMIC_CAPABILITY_VECTOR_32x4;
    case CU_ATOMIC_OPERATION_FLOAT_MIN:
    case CU_ATOMIC_OPERATION_FLOAT_MAX: return 0;
    default: return kIntegers;  // add, min, max, and, or, xor
  }
}

}  // namespace

// Per operation, what the link between two devices carries natively: nothing where the pair has no
// peer access, as CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED then reads 0.
CUDASIM_EXPORT CUresult cuDeviceGetP2PAtomicCapabilities(unsigned int* capabilities,
                                                         const CUatomicOperation* operations, unsigned int count,
                                                         CUdevice srcDevice, CUdevice dstDevice) {
  Locked l;
  if (CUresult rc = device_status(l, srcDevice); rc != CUDA_SUCCESS) return rc;
  if (!valid_device(l.st, dstDevice) || srcDevice == dstDevice) return CUDA_ERROR_INVALID_DEVICE;
  if (capabilities == nullptr || operations == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    if (operations[i] < 0 || operations[i] >= CU_ATOMIC_OPERATION_MAX) return CUDA_ERROR_INVALID_VALUE;
  }
  const bool native = can_access_peer(l.st, srcDevice, dstDevice);
  for (unsigned i = 0; i < count; ++i) capabilities[i] = native ? peer_atomic_capabilities(operations[i]) : 0;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h: INVALID_CONTEXT also "if the current context is peerContext"; another context of the same
  // device is no peer (cuDeviceCanAccessPeer says 0).
  if (peerContext == nullptr || peerContext == ctx || !l.st.contexts.contains(peerContext)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (!can_access_peer(l.st, ctx->device, peerContext->device)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  if (!l.st.peer_access.emplace(ctx, peerContext).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peerContext) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (peerContext == nullptr || !l.st.contexts.contains(peerContext)) return CUDA_ERROR_INVALID_CONTEXT;
  if (l.st.peer_access.erase({ctx, peerContext}) == 0) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  return CUDA_SUCCESS;
}

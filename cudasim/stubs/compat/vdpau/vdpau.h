/* The VDPAU types the CUDA interop headers name, for the simulator's stubs only (see GL/gl.h). */
#ifndef CUDASIM_COMPAT_VDPAU_H
#define CUDASIM_COMPAT_VDPAU_H
#include <stdint.h>
typedef int VdpStatus;
typedef uint32_t VdpFuncId;
typedef uint32_t VdpDevice;
typedef uint32_t VdpVideoSurface;
typedef uint32_t VdpOutputSurface;
typedef VdpStatus VdpGetProcAddress(VdpDevice device, VdpFuncId function_id, void** function_pointer);
#endif

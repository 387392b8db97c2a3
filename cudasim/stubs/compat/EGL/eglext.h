/* The EGL handle types the CUDA interop headers name, for the simulator's stubs only (see GL/gl.h). */
#ifndef CUDASIM_COMPAT_EGLEXT_H
#define CUDASIM_COMPAT_EGLEXT_H
#include "egl.h"
typedef void* EGLImageKHR;
typedef void* EGLStreamKHR;
typedef void* EGLSyncKHR;
#endif
